#include "runtime/islands/island_exchange.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {

std::vector<std::string> OuterCompressions() { return {"none", "fp16", "int8", "int4"}; }

namespace {

constexpr int64_t kInt4Block = 128;  // int4: the values that share a scale (outer_round.cc's wire bytes)

// Every piece flattened into one tensor (the pieces' precision).
torch::Tensor Flat(const std::vector<torch::Tensor>& pieces) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : pieces) flat.push_back(p.reshape({-1}));
  return torch::cat(flat);
}

// The flat tensor's values back into the pieces.
void Unflatten(const torch::Tensor& flat, std::vector<torch::Tensor>& pieces) {
  int64_t at = 0;
  for (torch::Tensor& p : pieces) {
    p = flat.narrow(0, at, p.numel()).view(p.sizes()).clone();
    at += p.numel();
  }
}

// What crosses the link for `pieces` flattened (`mine`): fp16 values; int8 values with one scale a
// piece (its largest magnitude over 127; fp64); or int4 values, two a byte, with one scale a block of
// kInt4Block values of a piece (the block's largest magnitude over 7; fp32).
struct Packed {
  torch::Tensor values, scales;  // scales: int8 and int4 only
};

// A piece's values in blocks of kInt4Block (zeros after the last), one block a row.
torch::Tensor Int4Blocks(const torch::Tensor& piece) {
  const int64_t n = piece.numel(), blocks = (n + kInt4Block - 1) / kInt4Block;
  return torch::constant_pad_nd(piece.reshape({-1}), {0, blocks * kInt4Block - n}).view({blocks, kInt4Block});
}

Packed PackInt4(const std::vector<torch::Tensor>& pieces) {
  std::vector<torch::Tensor> q, scales;
  for (const torch::Tensor& p : pieces) {
    const torch::Tensor blocks = Int4Blocks(p.to(torch::kFloat64));
    torch::Tensor most = std::get<0>(blocks.abs().max(1, true)).to(torch::kFloat32);  // as sent
    most = torch::where(most > 0, most, torch::full_like(most, 7));                   // a zero block: 1
    const torch::Tensor scale = most.to(torch::kFloat64) / 7;
    // -7..7 stored as 1..15, the even-numbered value in the high half of its byte.
    const torch::Tensor levels =
        (torch::round(blocks / scale).clamp(-7, 7) + 8).to(torch::kUInt8).view({blocks.numel() / 2, 2});
    q.push_back(levels.select(1, 0) * 16 + levels.select(1, 1));
    scales.push_back(most.reshape({-1}));
  }
  return {torch::cat(q), torch::cat(scales)};
}

Packed Pack(const std::vector<torch::Tensor>& pieces, const torch::Tensor& mine,
            const std::string& compression) {
  if (compression == "fp16") return {mine.to(torch::kFloat16), {}};
  if (compression == "int4") return PackInt4(pieces);
  MOTLEY_CHECK_MSG(compression == "int8", fmt::format("unknown outer compression {}", compression));
  std::vector<torch::Tensor> q;
  std::vector<double> scales;
  for (const torch::Tensor& p : pieces) {
    const double most = p.numel() == 0 ? 0 : p.abs().max().item<double>();
    const double scale = most > 0 ? most / 127 : 1;
    scales.push_back(scale);
    q.push_back(torch::round(p.reshape({-1}) / scale).clamp(-127, 127).to(torch::kInt8));
  }
  return {torch::cat(q), torch::tensor(scales, torch::kFloat64)};
}

torch::Tensor UnpackInt4(const torch::Tensor& values, const torch::Tensor& scales,
                         const std::vector<torch::Tensor>& like, torch::Dtype dtype) {
  std::vector<torch::Tensor> out;
  int64_t at = 0, block_at = 0;
  for (const torch::Tensor& piece : like) {
    const int64_t n = piece.numel(), blocks = (n + kInt4Block - 1) / kInt4Block;
    const torch::Tensor bytes = values.narrow(0, at, blocks * kInt4Block / 2).to(torch::kInt32);
    const torch::Tensor levels =
        torch::stack({bytes.div(16, "floor"), bytes.remainder(16)}, 1).view({blocks, kInt4Block}) - 8;
    const torch::Tensor scale = scales.narrow(0, block_at, blocks).to(torch::kFloat64).view({blocks, 1}) / 7;
    out.push_back((levels.to(torch::kFloat64) * scale).reshape({-1}).narrow(0, 0, n).to(dtype));
    at += blocks * kInt4Block / 2;
    block_at += blocks;
  }
  return torch::cat(out);
}

// Packed values back in `dtype`, flat (`like`: the pieces, for int8's scale a piece and int4's blocks).
torch::Tensor Unpack(const torch::Tensor& values, const torch::Tensor& scales,
                     const std::vector<torch::Tensor>& like, torch::Dtype dtype) {
  if (!scales.defined()) return values.to(dtype);
  if (values.scalar_type() == torch::kUInt8) return UnpackInt4(values, scales, like, dtype);
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (size_t i = 0; i < like.size(); ++i) {
    const int64_t n = like[i].numel();
    out.push_back(values.narrow(0, at, n).to(dtype) * scales[static_cast<int64_t>(i)].item<double>());
    at += n;
  }
  return torch::cat(out);
}

double RelativeError(const torch::Tensor& exact, const torch::Tensor& approx) {
  const double norm = exact.to(torch::kFloat64).norm().item<double>();
  return norm > 0 ? (exact.to(torch::kFloat64) - approx.to(torch::kFloat64)).norm().item<double>() / norm : 0;
}

}  // namespace

std::vector<torch::Tensor> AsArrived(const std::vector<torch::Tensor>& deltas, const std::string& compression,
                                     double* relative_error) {
  torch::NoGradGuard no_grad;
  if (relative_error != nullptr) *relative_error = 0;
  if (compression == "none" || deltas.empty()) return deltas;
  const torch::Tensor mine = Flat(deltas);
  const Packed packed = Pack(deltas, mine, compression);
  const torch::Tensor arrived = Unpack(packed.values, packed.scales, deltas, mine.scalar_type());
  if (relative_error != nullptr) *relative_error = RelativeError(mine, arrived);
  std::vector<torch::Tensor> out = deltas;
  Unflatten(arrived, out);
  return out;
}

Result<OuterExchange> AverageAcrossIslands(Communicator& comm, CommGroup& outer,
                                           std::vector<torch::Tensor>& deltas, double weight,
                                           const std::string& compression) {
  MOTLEY_CHECK_GE(outer.index, 0);
  MOTLEY_CHECK_GE(weight, 0);  // 0: an island that took no step since (a slower one, in a short last round)
  OuterExchange done;
  if (deltas.empty()) return done;
  torch::NoGradGuard no_grad;
  const torch::Tensor mine = Flat(deltas);
  const auto dtype = mine.scalar_type();
  const int n = outer.size();
  // The islands' weights, gathered (the sum divides the weighted sum).
  torch::Tensor weights = torch::empty({n}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, torch::tensor({weight}, torch::kFloat64), weights));
  const double total = weights.sum().item<double>();
  MOTLEY_CHECK_GT(total, 0);  // island 0, the run's clock, takes a step every round
  torch::Tensor sum;
  if (compression == "none") {
    sum = mine * weight;
    MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(outer, sum));
    done.bytes_sent = static_cast<double>(mine.numel() * mine.element_size());
  } else {
    // Compressed values do not add up: every island's are gathered and summed here, in `dtype`.
    const Packed packed = Pack(deltas, mine, compression);
    const int64_t count = packed.values.numel();
    torch::Tensor values = torch::empty({n * count}, packed.values.options()), scales;
    MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, packed.values, values));
    done.bytes_sent = static_cast<double>(count * packed.values.element_size());
    if (packed.scales.defined()) {
      scales = torch::empty({n * packed.scales.numel()}, packed.scales.options());
      MOTLEY_RETURN_IF_ERROR(comm.AllGather(outer, packed.scales, scales));
      done.bytes_sent += static_cast<double>(packed.scales.numel() * packed.scales.element_size());
    }
    sum = torch::zeros_like(mine);
    for (int i = 0; i < n; ++i) {
      const torch::Tensor arrived = Unpack(
          values.narrow(0, i * count, count),
          scales.defined() ? scales.narrow(0, i * packed.scales.numel(), packed.scales.numel()) : scales,
          deltas, dtype);
      sum.add_(arrived, weights[i].item<double>());
      if (i == outer.index) done.compression_error = RelativeError(mine, arrived);
    }
  }
  Unflatten(sum / total, deltas);
  return done;
}

Result<OuterExchange> AverageFragment(Communicator& comm, const std::vector<FragmentStep>& steps,
                                      std::vector<torch::Tensor>& values, double weight,
                                      const std::string& compression,
                                      const std::function<void(size_t)>& after) {
  torch::NoGradGuard no_grad;
  OuterExchange done;
  const bool lead =
      std::any_of(steps.begin(), steps.end(), [](const FragmentStep& s) { return s.across_islands; });
  for (size_t k = 0; k < steps.size(); ++k) {
    MOTLEY_CHECK(steps[k].group != nullptr);
    if (steps[k].across_islands) {
      MOTLEY_ASSIGN_OR_RETURN(done, AverageAcrossIslands(comm, *steps[k].group, values, weight, compression));
    } else {
      // The first: every holder's part summed; the second: the lead's average, the others adding zeros.
      torch::Tensor flat = Flat(values);
      if (k > 0 && !lead) flat.zero_();
      MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(*steps[k].group, flat));
      Unflatten(flat, values);
    }
    after(k);
  }
  return done;
}

}  // namespace motley
