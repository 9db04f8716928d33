#pragma once
// Activation checkpointing of one block (a decoder layer): the forward keeps
// only the block's input; backward runs the block again and differentiates
// the recomputed output.
//
// Two modes, chosen by `gradient_checkpointing_kwargs.use_reentrant`:
//  - reentrant (true): backward recomputes the block and runs a nested
//    backward through it, which accumulates the block's parameter gradients
//    directly into their .grad.
//  - non-reentrant (false): backward recomputes the block and returns the
//    parameter gradients through the main backward, like any other node, so
//    gradient hooks see them exactly as without checkpointing.
// In both, the block's trainable parameters are inputs of the checkpoint
// node, so the output requires grad even when the block's input does not
// (LoRA on a frozen base, where no activation entering a layer requires
// grad). The recompute repeats the forward's RNG state (dropout masks) and
// autocast state, and calls `fn` again; a sharded layer is already gathered
// then, by the sharding hooks around the layer's backward.
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "model/decoder.hpp"

namespace trlx::engine {

using BlockFn = std::function<torch::Tensor(const torch::Tensor& x)>;

// Runs `fn(x)` checkpointed. `params`: the block's parameters that require
// grad. Without grad mode (reference forwards, generation) it simply calls fn.
torch::Tensor checkpoint_block(const BlockFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                               bool reentrant);

// Checkpoints every decoder layer of `model` in training forwards; forwards
// without grad (reference model, generation, evaluation) run as usual.
void checkpoint_layers(model::LanguageModelImpl& model, bool reentrant);

}  // namespace trlx::engine
