#include "core/gpu_catalog.h"

#include <algorithm>
#include <atomic>
#include <cctype>

namespace motley {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGBps = 1e9;
constexpr double kTflops = 1e12;
// PCIe x16, per direction, after 128b/130b encoding.
constexpr double kPcieGen3 = 15.75 * kGBps;
constexpr double kPcieGen4 = 31.5 * kGBps;
constexpr double kPcieGen5 = 63.0 * kGBps;

GpuCatalog MakeBuiltin() {
  GpuCatalog c;
  // clang-format off
  //        name, display name, aliases,
  //        memory, memory bandwidth, fp16/bf16 dense, fp32, fp64 (dense; its tensor cores where it has
  //        them, as cuBLAS DGEMM uses them), bf16?, host link, NVLink per direction,
  //        source
  c.Upsert({"h100-sxm", "NVIDIA H100 SXM5 80GB", {"h100", "h100-sxm5"},
            80 * kGiB, 3350 * kGBps, 989.4 * kTflops, 66.9 * kTflops, 67 * kTflops, true, kPcieGen5, 450 * kGBps,
            "NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 1,979 TFLOPS with sparsity, FP32 67, "
            "3.35 TB/s HBM3, NVLink 900 GB/s bidirectional, PCIe Gen5; FP64 Tensor Core 67", 0, {}});
  c.Upsert({"h100-pcie", "NVIDIA H100 PCIe 80GB", {},
            80 * kGiB, 2000 * kGBps, 756.5 * kTflops, 51.2 * kTflops, 51.2 * kTflops, true, kPcieGen5, 300 * kGBps,
            "NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 1,513 TFLOPS with sparsity, FP32 51, "
            "2.0 TB/s HBM2e, NVLink bridge 600 GB/s bidirectional, PCIe Gen5; FP64 Tensor Core 51", 0, {}});
  c.Upsert({"h100-nvl", "NVIDIA H100 NVL 94GB", {"h100nvl"},
            94 * kGiB, 3900 * kGBps, 835.5 * kTflops, 60.0 * kTflops, 60 * kTflops, true, kPcieGen5, 300 * kGBps,
            "NVIDIA H100 NVL product brief (2024): BF16 1,671 TFLOPS with sparsity, FP32 60, "
            "3.9 TB/s HBM3, NVLink bridge 600 GB/s bidirectional, PCIe Gen5 "
            "(the Zorse paper's Table 3 uses 989 TFLOPS); FP64 Tensor Core 60", 0, {}});
  c.Upsert({"h200", "NVIDIA H200 SXM 141GB", {"h200-sxm"},
            141 * kGiB, 4800 * kGBps, 989.4 * kTflops, 66.9 * kTflops, 67 * kTflops, true, kPcieGen5, 450 * kGBps,
            "NVIDIA H200 Tensor Core GPU datasheet (2024): BF16 1,979 TFLOPS with sparsity, FP32 67, "
            "4.8 TB/s HBM3e, NVLink 900 GB/s bidirectional; FP64 Tensor Core 67", 0, {}});
  c.Upsert({"a100-40gb", "NVIDIA A100 SXM4 40GB", {"a100x40", "a100-40"},
            40 * kGiB, 1555 * kGBps, 312 * kTflops, 19.5 * kTflops, 19.5 * kTflops, true, kPcieGen4, 300 * kGBps,
            "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, FP32 19.5, "
            "1,555 GB/s HBM2, NVLink 600 GB/s bidirectional, PCIe Gen4; FP64 Tensor Core 19.5", 0, {}});
  c.Upsert({"a100-80gb", "NVIDIA A100 SXM4 80GB", {"a100x80", "a100-80"},
            80 * kGiB, 2039 * kGBps, 312 * kTflops, 19.5 * kTflops, 19.5 * kTflops, true, kPcieGen4, 300 * kGBps,
            "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense, FP32 19.5, "
            "2,039 GB/s HBM2e, NVLink 600 GB/s bidirectional, PCIe Gen4; FP64 Tensor Core 19.5", 0, {}});
  c.Upsert({"a10g", "NVIDIA A10G 24GB (AWS G5)", {},
            24 * kGiB, 600 * kGBps, 125 * kTflops, 31.2 * kTflops, 0.4875 * kTflops, true, kPcieGen4, 0,
            "Zorse paper Table 3 (125 TFLOPS FP16) and NVIDIA A10 datasheet (2021): FP32 31.2, "
            "600 GB/s GDDR6, PCIe Gen4; FP64 at 1/64 of FP32 (GA102)", 0, {}});
  c.Upsert({"a6000", "NVIDIA RTX A6000 48GB", {"rtx-a6000"},
            48 * kGiB, 768 * kGBps, 154.8 * kTflops, 38.7 * kTflops, 0.6047 * kTflops, true, kPcieGen4, 56.25 * kGBps,
            "NVIDIA RTX A6000 datasheet (2021): tensor 309.7 TFLOPS with sparsity, FP32 38.7, "
            "768 GB/s GDDR6, NVLink bridge 112.5 GB/s bidirectional, PCIe Gen4; FP64 at 1/64 of FP32 (GA102)", 0, {}});
  c.Upsert({"l4", "NVIDIA L4 24GB", {},
            24 * kGiB, 300 * kGBps, 121 * kTflops, 30.3 * kTflops, 0.4734 * kTflops, true, kPcieGen4, 0,
            "NVIDIA L4 Tensor Core GPU datasheet (2023): BF16 242 TFLOPS with sparsity, FP32 30.3, "
            "300 GB/s GDDR6, PCIe Gen4; FP64 at 1/64 of FP32 (AD104)", 0, {}});
  c.Upsert({"l40s", "NVIDIA L40S 48GB", {},
            48 * kGiB, 864 * kGBps, 366 * kTflops, 91.6 * kTflops, 1.431 * kTflops, true, kPcieGen4, 0,
            "NVIDIA L40S datasheet (2023): BF16 733 TFLOPS with sparsity, FP32 91.6, "
            "864 GB/s GDDR6, PCIe Gen4; FP64 at 1/64 of FP32 (AD102)", 0, {}});
  c.Upsert({"v100-16gb", "NVIDIA V100 SXM2 16GB", {"v100x16", "v100-16"},
            16 * kGiB, 900 * kGBps, 125 * kTflops, 15.7 * kTflops, 7.8 * kTflops, false, kPcieGen3, 150 * kGBps,
            "NVIDIA V100 Tensor Core GPU datasheet (2020): tensor 125 TFLOPS, FP32 15.7, "
            "900 GB/s HBM2, NVLink 300 GB/s bidirectional, PCIe Gen3; FP64 7.8", 0, {}});
  c.Upsert({"v100-32gb", "NVIDIA V100 SXM2 32GB", {"v100x32", "v100-32"},
            32 * kGiB, 900 * kGBps, 125 * kTflops, 15.7 * kTflops, 7.8 * kTflops, false, kPcieGen3, 150 * kGBps,
            "NVIDIA V100 Tensor Core GPU datasheet (2020): tensor 125 TFLOPS, FP32 15.7, "
            "900 GB/s HBM2, NVLink 300 GB/s bidirectional, PCIe Gen3; FP64 7.8", 0, {}});
  c.Upsert({"t4", "NVIDIA T4 16GB", {},
            16 * kGiB, 320 * kGBps, 65 * kTflops, 8.1 * kTflops, 0.2531 * kTflops, false, kPcieGen3, 0,
            "NVIDIA T4 Tensor Core GPU datasheet (2019): FP16 tensor 65 TFLOPS, FP32 8.1, "
            "320 GB/s GDDR6, PCIe Gen3; FP64 at 1/32 of FP32 (TU104)", 0, {}});
  c.Upsert({"p100", "NVIDIA Tesla P100 PCIe 16GB", {},
            16 * kGiB, 732 * kGBps, 18.7 * kTflops, 9.3 * kTflops, 4.7 * kTflops, false, kPcieGen3, 0,
            "NVIDIA Tesla P100 datasheet (2016), PCIe 16GB: FP16 18.7 TFLOPS, FP32 9.3, "
            "732 GB/s HBM2, PCIe Gen3; FP64 4.7", 0, {}});
  c.Upsert({"p40", "NVIDIA Tesla P40 24GB", {},
            24 * kGiB, 346 * kGBps, 0.183 * kTflops, 11.76 * kTflops, 0.3675 * kTflops, false, kPcieGen3, 0,
            "NVIDIA Tesla P40 datasheet (2016): FP32 12 TFLOPS (11.76 at boost); FP16 runs at 1/64 "
            "rate (GP102), 346 GB/s GDDR5, PCIe Gen3: train it in fp32; FP64 at 1/32 of FP32 (GP102)", 0, {}});
  c.Upsert({"rtx3090", "NVIDIA GeForce RTX 3090 24GB", {"rtx-3090", "3090"},
            24 * kGiB, 936 * kGBps, 71 * kTflops, 35.6 * kTflops, 0.556 * kTflops, true, kPcieGen4, 56.25 * kGBps,
            "NVIDIA Ampere GA102 GPU architecture whitepaper (2020): FP16 tensor with FP32 "
            "accumulate 71 TFLOPS dense, FP32 35.6, 936 GB/s GDDR6X, NVLink 112.5 GB/s "
            "bidirectional, PCIe Gen4; FP64 556 GFLOPS", 0, {}});
  c.Upsert({"rtx4090", "NVIDIA GeForce RTX 4090 24GB", {"rtx-4090", "4090"},
            24 * kGiB, 1008 * kGBps, 165.2 * kTflops, 82.6 * kTflops, 1.29 * kTflops, true, kPcieGen4, 0,
            "NVIDIA Ada GPU architecture whitepaper (2022): FP16 tensor with FP32 accumulate "
            "165.2 TFLOPS dense, FP32 82.6, 1,008 GB/s GDDR6X, PCIe Gen4; FP64 1,290 GFLOPS", 0, {}});
  // clang-format on
  // The reserve per generation. Measured components, as published: the CUDA context of a PyTorch
  // process takes ~300-600 MiB with lazy module loading (CUDA >= 11.7, CUDA_MODULE_LOADING=LAZY)
  // and up to ~1 GiB without (PyTorch's CUDA semantics notes; NVIDIA's CUDA C++ Programming Guide,
  // "Lazy Loading"); NCCL allocates NCCL_BUFFSIZE (4 MiB) per channel and peer, ~0.2-0.5 GiB for a
  // few peers (NCCL's environment-variable documentation); PyTorch's caching allocator keeps freed
  // blocks reserved, 5-15% of the peak in training (torch.cuda.memory_reserved vs _allocated,
  // PyTorch's memory-management notes). Larger devices run larger peaks, so the margin grows with
  // the generation's typical memory.
  struct Generation {
    std::vector<const char*> types;
    double reserve;
    const char* note;
  };
  const std::vector<Generation> generations = {
      {{"h100-sxm", "h100-pcie", "h100-nvl", "h200"}, 2.5 * kGiB, "Hopper, 80-141 GB"},
      {{"a100-40gb", "a100-80gb", "a6000", "l40s"}, 2.0 * kGiB, "Ampere/Ada data-centre, 40-80 GB"},
      {{"a10g", "l4", "rtx3090", "rtx4090", "p40"}, 1.5 * kGiB, "24 GB cards"},
      {{"v100-16gb", "v100-32gb", "t4", "p100"}, 1.25 * kGiB, "Volta/Turing/Pascal, 16-32 GB"},
  };
  for (const Generation& g : generations)
    for (const char* name : g.types)
      if (const GpuSpec* found = c.Find(name)) {
        GpuSpec s = *found;
        s.reserve_bytes = g.reserve;
        s.reserve_source = std::string("motley's default for ") + g.note +
                           ": CUDA context 0.3-1 GiB (CUDA lazy loading; PyTorch CUDA semantics), NCCL "
                           "buffers 4 MiB per channel and peer (NCCL docs), caching-allocator "
                           "fragmentation 5-15% of the peak; a cluster file's reserve = ... replaces it";
        c.Upsert(std::move(s));
      }
  return c;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

double PeakFlops(const GpuSpec& spec, Precision p) {
  switch (p) {
    case Precision::kFp64:
      return spec.peak_fp64_flops;
    case Precision::kFp32:
      return spec.peak_fp32_flops;
    case Precision::kBf16:
    case Precision::kFp16:
      return spec.peak_fp16_flops;
  }
  return spec.peak_fp16_flops;
}

const GpuCatalog& GpuCatalog::Builtin() {
  static const GpuCatalog catalog = MakeBuiltin();
  return catalog;
}

const GpuSpec* GpuCatalog::Find(std::string_view name) const {
  // Exact names first: the simulator asks for a device's spec per op, and a case-folding
  // comparison over the whole catalog showed in the planner's profile.
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  for (const auto& s : specs_)
    if (EqualsIgnoreCase(s.name, name)) return &s;
  for (const auto& s : specs_)
    for (const auto& a : s.aliases)
      if (EqualsIgnoreCase(a, name)) return &s;
  return nullptr;
}

uint64_t GpuCatalog::NextVersion() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void GpuCatalog::Upsert(GpuSpec spec) {
  version_ = NextVersion();
  for (auto& s : specs_) {
    if (EqualsIgnoreCase(s.name, spec.name)) {
      s = std::move(spec);
      return;
    }
  }
  specs_.push_back(std::move(spec));
}

std::vector<std::string> GpuCatalog::AllNames() const {
  std::vector<std::string> names;
  for (const auto& s : specs_) {
    names.push_back(s.name);
    names.insert(names.end(), s.aliases.begin(), s.aliases.end());
  }
  return names;
}

}  // namespace motley
