#pragma once
// 4-bit weights as bitsandbytes stores them (QLoRA's load_in_4bit): the
// flattened weight cut into blocks of `blocksize` values, each block scaled
// by its largest magnitude (absmax) and every scaled value replaced by the
// nearest of 16 code values (NF4 or FP4), two codes per byte, the first in
// the high nibble. With double quantization the absmax values themselves
// are stored as 8-bit codes of bitsandbytes' signed dynamic map, in blocks
// of 256, after subtracting their mean (`offset`).
//
// The codes and scales equal bitsandbytes' bit for bit (its reference
// kernels: round to the nearest code, ties to the lower one), so a weight
// quantized here dequantizes to the values bitsandbytes gives.
#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder.hpp"  // LibTorch comes with it

namespace trlx::model {

struct Quant4Options {
  std::string quant_type = "nf4";  // nf4 or fp4
  int64_t blocksize = 64;
  bool double_quant = false;       // bnb_4bit_use_double_quant
  torch::Dtype compute_dtype = torch::kFloat32;  // bnb_4bit_compute_dtype
};

struct Quant4Weight {
  torch::Tensor packed;       // uint8 [ceil(numel / 2)]
  torch::Tensor absmax;       // float32 [blocks]; uint8 codes with double_quant
  torch::Tensor absmax_scale; // double_quant: float32 [ceil(blocks / 256)]
  float offset = 0;           // double_quant: the mean subtracted from absmax
  torch::Tensor code;         // the 16 code values, on the weight's device
  torch::Tensor absmax_code;  // double_quant: the 8-bit dynamic map, there too
  std::vector<int64_t> shape;
  std::string quant_type;
  int64_t blocksize = 64;
  bool double_quant = false;
  torch::Dtype compute_dtype = torch::kFloat32;
  int64_t bytes() const;  // what it keeps in memory
};

// bitsandbytes' 16 code values of `quant_type` (nf4 or fp4), float32.
torch::Tensor code_4bit(const std::string& quant_type);
// bitsandbytes' 8-bit dynamic map (create_dynamic_map), 256 values: signed
// (4-bit scales, Adam's first moment) or unsigned (Adam's second moment).
torch::Tensor dynamic_map_8bit(bool is_signed = true);

// Blockwise 8-bit quantization with `code` (bitsandbytes'
// quantize_blockwise): codes (uint8, the input's shape) and per-block absmax.
std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& x, const torch::Tensor& code,
                                                           int64_t blocksize);
torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& code,
                                   int64_t blocksize);

// InputError for a quant_type other than nf4/fp4 or a blocksize bitsandbytes
// does not take (64 to 4096, a power of two).
Quant4Weight quantize_4bit(const torch::Tensor& weight, const Quant4Options& options);
// The weight back, in `dtype` (computed in float32, as bitsandbytes does).
// On the CPU one pass over the codes; elsewhere tensor operations.
torch::Tensor dequantize_4bit(const Quant4Weight& q, torch::Dtype dtype);
// The tensor-operation path on any device (what GPUs run), for tests to
// hold the CPU pass against.
torch::Tensor dequantize_4bit_ops(const Quant4Weight& q, torch::Dtype dtype);

// QLoRA's load_in_4bit, as transformers quantizes a model for bitsandbytes:
// every linear layer but the output head (lm_head, score) keeps its weight
// in 4 bits (LinearImpl::quant4; the codes and scales are buffers of a child
// `quant4` module, so they move with the model) and its float weight is
// released. Biases, embeddings and norms stay as they are. The layers must
// not be trained (adapters train on top). Returns the bytes the quantized
// weights keep and the bytes the float weights had.
struct QuantizedModel {
  int64_t layers = 0;
  int64_t bytes = 0, float_bytes = 0;
};
QuantizedModel quantize_linears_4bit(LanguageModelImpl& m, const Quant4Options& options);

// While one lives (on this thread), a 4-bit layer's forward keeps the
// weight it dequantized for its backward instead of dequantizing again
// there. Checkpointing holds one around a layer's recompute, whose backward
// follows at once: one layer's weights are kept, for that layer's backward
// only, and a third of the dequantizations go.
class KeepDequantizedWeights {
 public:
  KeepDequantizedWeights();
  ~KeepDequantizedWeights();
  KeepDequantizedWeights(const KeepDequantizedWeights&) = delete;
  KeepDequantizedWeights& operator=(const KeepDequantizedWeights&) = delete;
  static bool active();

 private:
  bool prev_;
};

// How many times dequantize_4bit has run in this process (tests count the
// dequantizations a step takes).
int64_t dequantizations();

// A linear layer's weight as float32 whichever way it is kept.
torch::Tensor float_weight(const LinearImpl& l);

}  // namespace trlx::model
