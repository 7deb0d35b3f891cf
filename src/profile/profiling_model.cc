#include "profile/profiling_model.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace motley {

PieceParams PieceParamsOf(LlamaModel& model) {
  PieceParams out;
  for (auto& p : model->named_parameters()) {
    if (p.key().rfind("model.layers.0.", 0) == 0) out.layer.push_back(p.value());
    if (p.key() == "model.norm.weight" || p.key() == "lm_head.weight" ||
        (model->spec().tie_embeddings && p.key() == "model.embed_tokens.weight"))
      out.head.push_back(p.value());
  }
  return out;
}

c10::Device ProfilingDevice() {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice();  // a launched rank's own
}

}  // namespace motley
