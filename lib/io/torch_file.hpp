#pragma once
// LibTorch archives (optimizer state, RNG state) written through an
// AtomicFile. LibTorch's archive writer ends the process when its stream
// fails mid-archive (its destructor throws while the first error unwinds),
// so a full disk used to abort a checkpoint and leave its temporary folder
// behind. The stream it writes to here never fails: the first I/O error is
// kept, and thrown as trlx::Error naming the file once the archive is done;
// the temporary file is removed and the target left as it was.
#include <filesystem>
#include <functional>
#include <ostream>

namespace trlx::io {

void write_torch_file(const std::filesystem::path& target, const std::function<void(std::ostream&)>& save);

}  // namespace trlx::io
