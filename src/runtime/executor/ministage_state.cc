#include "runtime/executor/ministage_state.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "plan/state_shares.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/llama_model.h"
#include "runtime/optim/adamw.h"

namespace motley {

MinistageState::MinistageState(
    std::vector<NamedParameter> params, int dp_size, int dp_index, bool sharded_optimizer, CopyEngine* copies,
    bool shard_in_flat, const std::vector<double>& state_shares,
    const std::function<Status(const std::string&, int64_t, torch::Tensor)>* source)
    : params_(std::move(params)),
      sharded_(sharded_optimizer),
      shard_in_flat_(sharded_optimizer && shard_in_flat),
      copies_(copies),
      device_(copies->device()) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i].param;
    ranges_.push_back({i, numel_, p.numel(), p.sizes().vec()});
    numel_ += p.numel();
  }
  dp_size_ = sharded_ ? dp_size : 1;
  dp_index_ = sharded_ ? dp_index : 0;
  const StateSplit split = SplitState(numel_, dp_size_, sharded_ ? state_shares : std::vector<double>{});
  shard_numel_ = split.numel[dp_index_];
  shard_begin_ = split.begin[dp_index_];
  padded_numel_ = split.padded_numel;
  if (!split.even) shard_counts_ = split.numel;
  dtype_ = params_.empty() ? torch::kFloat32 : params_[0].param.scalar_type();  // the master dtype
  const auto options = torch::TensorOptions().dtype(dtype_).device(device_);
  flat_ = torch::zeros({padded_numel()}, options);
  for (const Range& r : ranges_) {
    const torch::Tensor& p = params_[r.param].param;
    if (!IsPlaceholder(p)) {
      flat_.narrow(0, r.flat_begin, r.numel).copy_(p.reshape(-1));
      continue;
    }
    // A placeholder: its elements in this rank's shard from the source (the rest are gathered).
    MOTLEY_CHECK_MSG(source != nullptr, "a placeholder parameter without a source: " + params_[r.param].name);
    const int64_t begin = std::max(r.flat_begin, shard_begin_),
                  end = std::min(r.flat_begin + r.numel, shard_begin_ + shard_numel_);
    if (begin < end && source_status_.ok())
      source_status_ =
          (*source)(params_[r.param].name, begin - r.flat_begin, flat_.narrow(0, begin, end - begin));
  }
  PointParamsAt(flat_);
  if (sharded_) {
    shard_ = flat_.narrow(0, shard_begin_, shard_numel_);
    if (!shard_in_flat_) shard_ = shard_.clone();
  }
  exp_avg_ = torch::zeros({shard_numel_}, options);
  exp_avg_sq_ = torch::zeros({shard_numel_}, options);
}

void MinistageState::PointParamsAt(const torch::Tensor& flat) {
  for (const Range& r : ranges_)
    params_[r.param].param.set_data(flat.narrow(0, r.flat_begin, r.numel).view(r.shape));
}

torch::Tensor& MinistageState::AllocateFlat() {
  if (!flat_.defined()) {
    flat_ = torch::empty({padded_numel()}, torch::TensorOptions().dtype(dtype_).device(device_));
    PointParamsAt(flat_);
  }
  return flat_;
}

void MinistageState::ReleaseFlat() {
  if (!flat_.defined()) return;
  MOTLEY_CHECK(!shard_in_flat_);  // the master shard lives there
  const auto empty = torch::empty({0}, torch::TensorOptions().dtype(dtype_).device(device_));
  for (auto& p : params_) p.param.set_data(empty);
  flat_ = torch::Tensor();
}

torch::Tensor& MinistageState::GradFlat() {
  if (!grad_flat_.defined())
    grad_flat_ = torch::zeros({padded_numel()}, torch::TensorOptions().dtype(dtype_).device(device_));
  return grad_flat_;
}

void MinistageState::AccumulateGrad(size_t index, const torch::Tensor& grad) {
  const Range& r = ranges_[index];
  GradFlat().narrow(0, r.flat_begin, r.numel).add_(grad.reshape(-1).to(dtype_));
}

void MinistageState::AccumulateGradPart(size_t index, int dim, int64_t begin, const torch::Tensor& part) {
  const Range& r = ranges_[index];
  GradFlat()
      .narrow(0, r.flat_begin, r.numel)
      .view(params_[index].param.sizes())
      .narrow(dim, begin, part.size(dim))
      .add_(part.to(dtype_));
}

torch::Tensor& MinistageState::GradShard() {
  MOTLEY_CHECK(sharded_);
  if (!grad_shard_.defined())
    grad_shard_ = torch::zeros({shard_numel_}, torch::TensorOptions().dtype(dtype_).device(device_));
  return grad_shard_;
}

torch::Tensor MinistageState::TakeZeroGradShard() {
  if (!grad_shard_.defined() || !grad_shard_zero_) return {};
  grad_shard_zero_ = false;
  return grad_shard_;
}

void MinistageState::AddToGradShard(torch::Tensor reduced) {
  MOTLEY_CHECK(sharded_);
  MOTLEY_CHECK_EQ(reduced.numel(), shard_numel_);
  grad_shard_zero_ = false;
  if (grad_shard_.defined() && reduced.data_ptr() == grad_shard_.data_ptr())
    return;  // reduced into the shard
  if (grad_shard_.defined()) {
    grad_shard_.add_(reduced);
  } else {
    grad_shard_ = reduced.view(-1);
  }
}

std::vector<ParamShard> MinistageState::OptimizerShards() {
  MOTLEY_CHECK(exp_avg_.defined());
  torch::Tensor& master = sharded_ ? shard_ : flat_;
  torch::Tensor& grad = sharded_ ? GradShard() : GradFlat();
  MOTLEY_CHECK(master.defined());
  std::vector<ParamShard> out;
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, shard_begin_);
    const int64_t hi = std::min(r.flat_begin + r.numel, shard_begin_ + shard_numel_);
    if (lo >= hi) continue;
    const int64_t at = lo - shard_begin_;
    ParamShard s;
    s.name = params_[r.param].name;
    s.param = master.narrow(0, at, hi - lo);
    s.grad = grad.narrow(0, at, hi - lo);
    s.decay = r.shape.size() >= 2;
    s.exp_avg = exp_avg_.narrow(0, at, hi - lo);
    s.exp_avg_sq = exp_avg_sq_.narrow(0, at, hi - lo);
    out.push_back(std::move(s));
  }
  return out;
}

torch::Tensor MinistageState::GradFlatOf(const std::string& name) {
  for (const Range& r : ranges_)
    if (params_[r.param].name == name) return GradFlat().narrow(0, r.flat_begin, r.numel);
  return torch::Tensor();
}

torch::Tensor MinistageState::GradSquaredSum(const std::function<bool(const std::string&)>& counts) {
  torch::Tensor& grad = sharded_ ? GradShard() : GradFlat();
  torch::Tensor sum = torch::zeros({}, grad.options().dtype(torch::kFloat64));
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, shard_begin_);
    const int64_t hi = std::min(r.flat_begin + r.numel, shard_begin_ + shard_numel_);
    if (lo >= hi || !counts(params_[r.param].name)) continue;
    sum += SumOfSquares(grad.narrow(0, lo - shard_begin_, hi - lo));
  }
  return sum;
}

torch::Tensor MinistageState::MasterShard() const {
  if (!sharded_) return flat_;
  return shard_.defined() ? shard_ : host_shard_;
}

torch::Tensor MinistageState::Moment(int k) const {
  const torch::Tensor& device = k == 0 ? exp_avg_ : exp_avg_sq_;
  return device.defined() ? device : (k == 0 ? host_exp_avg_ : host_exp_avg_sq_);
}

std::string MinistageState::LoadMoments(const std::map<std::string, torch::Tensor>& exp_avg,
                                        const std::map<std::string, torch::Tensor>& exp_avg_sq) {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();  // the moments may be in host memory, written by a copy
  WaitReady(true);
  torch::Tensor m1 = Moment(0), m2 = Moment(1);
  for (const Range& r : ranges_) {
    const std::string& name = params_[r.param].name;
    auto a = exp_avg.find(name), b = exp_avg_sq.find(name);
    if (a == exp_avg.end() || b == exp_avg_sq.end()) return name;
    const int64_t lo = std::max(r.flat_begin, shard_begin_);
    const int64_t hi = std::min(r.flat_begin + r.numel, shard_begin_ + shard_numel_);
    if (lo >= hi) continue;
    m1.narrow(0, lo - shard_begin_, hi - lo)
        .copy_(a->second.reshape(-1).narrow(0, lo - r.flat_begin, hi - lo));
    m2.narrow(0, lo - shard_begin_, hi - lo)
        .copy_(b->second.reshape(-1).narrow(0, lo - r.flat_begin, hi - lo));
  }
  return "";
}

std::vector<MinistageState::OwnedPiece> MinistageState::OwnedPieces() const {
  std::vector<OwnedPiece> out;
  const torch::Tensor master = MasterShard(), m1 = Moment(0), m2 = Moment(1);
  // ZeRO-0: the master is the flat buffer and the shard all of it (shard_begin_ is 0).
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, shard_begin_);
    const int64_t hi = std::min(r.flat_begin + r.numel, shard_begin_ + shard_numel_);
    if (lo >= hi) continue;
    out.push_back({r.param, lo - r.flat_begin, hi - lo, master.narrow(0, lo - shard_begin_, hi - lo),
                   m1.narrow(0, lo - shard_begin_, hi - lo), m2.narrow(0, lo - shard_begin_, hi - lo)});
  }
  return out;
}

std::string MinistageState::FlatRange(int64_t begin, int64_t count,
                                      const std::map<std::string, torch::Tensor>& whole,
                                      torch::Tensor* out) const {
  torch::NoGradGuard no_grad;
  *out = torch::zeros({count}, torch::TensorOptions().dtype(MasterShard().scalar_type()));
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, begin), hi = std::min(r.flat_begin + r.numel, begin + count);
    if (lo >= hi) continue;
    const auto it = whole.find(params_[r.param].name);
    if (it == whole.end()) return params_[r.param].name;
    out->narrow(0, lo - begin, hi - lo).copy_(it->second.reshape(-1).narrow(0, lo - r.flat_begin, hi - lo));
  }
  return "";
}

std::vector<MinistageState::Overlap> MinistageState::Overlaps(
    int64_t begin, int64_t count, const std::map<std::string, torch::Tensor>& whole) const {
  std::vector<Overlap> out;
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, begin), hi = std::min(r.flat_begin + r.numel, begin + count);
    const auto it = whole.find(params_[r.param].name);
    if (lo < hi && it != whole.end()) out.push_back({it->second, lo - r.flat_begin, lo - begin, hi - lo});
  }
  return out;
}

std::vector<MinistageState::NamedPart> MinistageState::PartsIn(int64_t begin, int64_t count) const {
  std::vector<NamedPart> out;
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(r.flat_begin, begin), hi = std::min(r.flat_begin + r.numel, begin + count);
    if (lo < hi) out.push_back({params_[r.param].name, lo - begin, hi - lo});
  }
  std::sort(out.begin(), out.end(),
            [](const NamedPart& a, const NamedPart& b) { return a.in_range < b.in_range; });
  return out;
}

void MinistageState::FlatRangeFrom(int64_t begin, const std::map<std::string, torch::Tensor>& whole,
                                   torch::Tensor& flat) const {
  torch::NoGradGuard no_grad;
  for (const Overlap& o : Overlaps(begin, flat.numel(), whole))
    flat.narrow(0, o.in_flat, o.count).copy_(o.param.reshape(-1).narrow(0, o.in_param, o.count));
}

void MinistageState::FlatRangeInto(int64_t begin, const torch::Tensor& flat,
                                   std::map<std::string, torch::Tensor>& whole) const {
  torch::NoGradGuard no_grad;
  for (const Overlap& o : Overlaps(begin, flat.numel(), whole)) {
    MOTLEY_CHECK(o.param.is_contiguous());
    torch::Tensor param = o.param;  // shares the storage of `whole`'s tensor
    param.view(-1).narrow(0, o.in_param, o.count).copy_(flat.narrow(0, o.in_flat, o.count));
  }
}

void MinistageState::SwapFirstMoment(torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();  // the moments may be in host memory, written by a copy
  WaitReady(true);
  torch::Tensor m = Moment(0);
  MOTLEY_CHECK(m.defined());
  MOTLEY_CHECK_EQ(m.numel(), values.numel());
  const torch::Tensor before = m.clone();
  m.copy_(values.to(m.device()));
  values.copy_(before.to(values.device()));
}

void MinistageState::ClearGradients() {
  if (grad_shard_.defined()) grad_shard_.zero_();
  grad_shard_zero_ = grad_shard_.defined();
  if (grad_flat_.defined()) grad_flat_.zero_();
}

void MinistageState::Offload() {
  MOTLEY_CHECK(sharded_ && !shard_in_flat_);
  CopyTicket done;  // copies on one stream complete in order: the last one's ticket covers all
  // Into the same host buffers (their last readers, the prefetches, come first).
  if (shard_.defined()) host_shard_ = copies_->ToHost(shard_, shard_read_, &done, host_shard_);
  if (exp_avg_.defined()) {
    host_exp_avg_ = copies_->ToHost(exp_avg_, moments_read_, &done, host_exp_avg_);
    host_exp_avg_sq_ = copies_->ToHost(exp_avg_sq_, moments_read_, &done, host_exp_avg_sq_);
  }
  if (done.pending()) host_ready_ = done;
  shard_ready_ = moments_ready_ = {};
  shard_ = exp_avg_ = exp_avg_sq_ = grad_shard_ = torch::Tensor();
}

void MinistageState::Prefetch(bool with_moments) {
  MOTLEY_CHECK(host_shard_.defined());
  CopyTicket done;
  if (!shard_.defined()) {  // first: the gather waits for it alone
    shard_ = copies_->ToDevice(host_shard_, host_ready_, &done);
    if (done.pending()) shard_ready_ = shard_read_ = done;
  }
  if (with_moments && !exp_avg_.defined()) {
    exp_avg_ = copies_->ToDevice(host_exp_avg_, host_ready_, &done);
    exp_avg_sq_ = copies_->ToDevice(host_exp_avg_sq_, host_ready_, &done);
    if (done.pending()) moments_ready_ = moments_read_ = done;
  }
}

void MinistageState::DropDeviceShard() {
  if (host_shard_.defined()) shard_ = torch::Tensor();
}

}  // namespace motley
