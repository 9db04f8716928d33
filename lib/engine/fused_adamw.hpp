#pragma once
// AdamW's update through ATen's fused kernel (one pass over each tensor group
// instead of a chain of element-wise ops per parameter), on the optimizer's
// own state: the moments and step counts torch::optim::AdamW keeps and saves,
// so checkpoints are the same as with its own step() and either can resume
// the other's.
#include <torch/torch.h>

namespace trlx::engine {

// One AdamW step over every parameter with a gradient, as
// torch::optim::AdamW::step() computes it (decoupled weight decay, bias
// correction); amsgrad is refused (trlx never sets it).
void fused_adamw_step(torch::optim::AdamW& optimizer);

}  // namespace trlx::engine
