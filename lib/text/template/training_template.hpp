#pragma once
// Training variants of known chat templates. A stock template may lack what
// training needs: {% generation %} blocks around assistant turns (the
// assistant mask of assistant_only_loss) and prefix preservation (a
// conversation renders as a prefix of its continuation, which tool-calling
// rollouts extend token by token; Qwen3's drops the thinking block of earlier
// turns). For the families trlx knows, it derives the variant from the
// template itself by a few edits at the places those families write an
// assistant turn, so any release of the family that keeps those places gets
// one, and the rest of the template is left as it is.
#include <optional>
#include <string>

namespace trlx::text {

struct TrainingTemplate {
  std::string family;  // e.g. "qwen3"
  std::string source;  // the training variant's text
};

// The training variant of `source`, or nullopt when trlx knows no variant for
// it (a template that already has {% generation %} needs none: nullopt too).
std::optional<TrainingTemplate> training_variant(const std::string& source);

}  // namespace trlx::text
