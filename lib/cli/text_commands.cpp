// `trlx tokenize` and `trlx render-template`: not built yet.
#include "cli/cli.hpp"
#include "core/error.hpp"

namespace trlx::cli {

int run_tokenize(std::vector<std::string>) { throw Error("trlx tokenize is not built yet"); }
int run_render_template(std::vector<std::string>) { throw Error("trlx render-template is not built yet"); }

}  // namespace trlx::cli
