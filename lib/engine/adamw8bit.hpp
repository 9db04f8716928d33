#pragma once
// optim: adamw_8bit (and paged_adamw_8bit, adamw_bnb_8bit): AdamW with both
// moments kept in 8 bits as bitsandbytes' AdamW8bit keeps them, on the state
// of a torch::optim::AdamW so that checkpoints save and resume it unchanged:
//
//   exp_avg         uint8 codes of the first moment (signed dynamic map)
//   exp_avg_sq      uint8 codes of the second moment (unsigned dynamic map)
//   max_exp_avg_sq  float32 [2, blocks]: each block's absmax of the two
//                   (amsgrad's slot, which trlx never uses)
//
// in blocks of 256 values. A parameter (or, under ZeRO, a shard) of fewer
// than 4096 values keeps float32 moments, as bitsandbytes' min_8bit_size.
// Each step dequantizes, updates as bitsandbytes' Adam does, and quantizes
// again (to the nearest code, bitsandbytes' reference rule).
#include <string>

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace trlx::engine {

void adamw_8bit_step(torch::optim::AdamW& optimizer);

// True for the optim names that select it.
bool is_adamw_8bit(const std::string& optim);

}  // namespace trlx::engine
