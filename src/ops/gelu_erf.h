#pragma once
// GELU in its exact erf form of every element, in place, as a named operator (backend/operator.h): the Whisper
// audio encoder's convolutions, FFN and Voxtral's projector (mmproj/whisper_audio.cpp; ggml_gelu_erf). Evaluated
// as ggml's CPU backend does for F32 (ggml_vec_gelu_erf_f32: 0.5 x (1 + erff(x / sqrt 2)) in float, no table).
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference.
void gelu_erf_rows(float* x, int64_t n);

namespace ops {
struct GeluErfArgs {
  Act x;
  int64_t n = 0;
};
extern const Op<GeluErfArgs> gelu_erf;
}  // namespace ops

}  // namespace kestrel
