// MinistageState: one ministage's parameters, gradients and AdamW state on one rank, laid out for
// ZeRO. The ministage's parameters are views into one flat buffer (padded to a multiple of the
// data-parallel degree d); rank i of the group owns elements [i*S, (i+1)*S) of it, S = padded / d:
// the master shard of the parameters, the gradient shard and the AdamW moments — or, with uneven
// state shares (plan/state_shares.h), the unpadded buffer split by the shares. ZeRO-0 owns the
// whole buffer.
//
// The full parameters are "gathered" (the model's tensors point into the flat buffer) or
// "released" (the model's tensors are empty); ZeRO-3 and parameter offload release them between
// visits, and keep the master shard apart; otherwise the shard is part of the flat buffer.
// Offload moves the shard and moments to host memory (outside the memory ledger) and back, bit for
// bit, through the rank's CopyEngine (asynchronous on a GPU: WaitReady() before compute reads a
// prefetched shard or moments; the engine's Synchronize() before the host reads offloaded ones).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"
#include "runtime/executor/copy_engine.h"
#include "runtime/optim/adamw.h"

namespace motley {

struct NamedParameter {
  std::string name;
  torch::Tensor param;  // the model's parameter (its storage is replaced)
};

class MinistageState {
 public:
  /// Flattens `params` (copying their current values) and takes this rank's shard. With
  /// `shard_in_flat` (the full parameters are never released: ZeRO-1/2 without parameter offload)
  /// the master shard is the owned part of the flat buffer, not a copy of it: the update writes
  /// the parameters in place and the gather fills in the other ranks' parts.
  /// `state_shares`: each replica's share of the state (Schedule ministage's); empty: even shards.
  /// `source`: the values of a placeholder parameter's elements in this rank's shard (the others
  /// stay zero until gathered); REQUIRED when a parameter is a placeholder. Its first error is
  /// source_status().
  MinistageState(std::vector<NamedParameter> params, int dp_size, int dp_index, bool sharded_optimizer,
                 CopyEngine* copies, bool shard_in_flat = false, const std::vector<double>& state_shares = {},
                 const std::function<Status(const std::string&, int64_t, torch::Tensor)>* source = nullptr);
  const Status& source_status() const { return source_status_; }

  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int64_t shard_numel() const { return shard_numel_; }
  int64_t shard_begin() const { return shard_begin_; }
  /// Every replica's shard size, for the collectives that gather and reduce-scatter uneven shards;
  /// empty when the shards are even.
  const std::vector<int64_t>& shard_counts() const { return shard_counts_; }
  const std::vector<NamedParameter>& params() const { return params_; }

  // ---- Full parameters ----
  bool gathered() const { return flat_.defined(); }
  /// Allocates the flat buffer and points the parameters into it (values undefined until filled).
  torch::Tensor& AllocateFlat();
  /// The parameters become empty tensors; the buffer is freed.
  void ReleaseFlat();
  torch::Tensor& flat() { return flat_; }

  // ---- The owned shard (ZeRO >= 1; ZeRO-0 steps on the flat buffer) ----
  bool sharded() const { return sharded_; }
  bool shard_in_flat() const { return shard_in_flat_; }
  /// The master shard on the device, or undefined while offloaded.
  torch::Tensor& shard() { return shard_; }
  /// The current master values of the owned elements, wherever they are (ZeRO-0: the flat buffer).
  torch::Tensor MasterShard() const;
  /// AdamW's first (k = 0) or second (k = 1) moment of the owned elements, wherever it is.
  torch::Tensor Moment(int k) const;

  // ---- Gradients ----
  /// The full gradient buffer, zero-filled when first needed after a reduction.
  torch::Tensor& GradFlat();
  bool has_grad_flat() const { return grad_flat_.defined(); }
  void ReleaseGradFlat() { grad_flat_ = torch::Tensor(); }
  /// Parameter `name`'s part of GradFlat() (a flat view); undefined when the ministage lacks it.
  torch::Tensor GradFlatOf(const std::string& name);
  /// Adds a parameter's gradient (index into params()) into the flat gradient.
  void AccumulateGrad(size_t index, const torch::Tensor& grad);
  /// The owned gradient shard, accumulating reduce-scatter outputs (ZeRO >= 1).
  torch::Tensor& GradShard();
  /// Adds a reduce-scatter's output into the gradient shard; the shard takes `reduced` itself
  /// when it has no buffer yet (no copy, no second buffer). `reduced` must not be used after.
  void AddToGradShard(torch::Tensor reduced);
  /// Where a reduction of the gradients can write its result directly: the gradient shard while it
  /// holds zeros (cleared by the last update, nothing added since), so that no shard-sized buffer
  /// is held beside it; undefined otherwise. The shard counts as written from here on.
  torch::Tensor TakeZeroGradShard();

  // ---- Optimizer ----
  /// The owned ranges as AdamW shards (views into the shard, gradient and moments). REQUIRES: the
  /// shard and moments are on the device.
  std::vector<ParamShard> OptimizerShards();
  /// Adds `part` to the slice [begin, begin + part.size(dim)) along `dim` of parameter `index`'s
  /// gradient (FlexTP: gradients of units computed elsewhere).
  void AccumulateGradPart(size_t index, int dim, int64_t begin, const torch::Tensor& part);
  /// The sum of squares of the owned gradient elements of the parameters `counts` accepts (fp64).
  torch::Tensor GradSquaredSum(const std::function<bool(const std::string&)>& counts);
  /// After a step: clears the gradients.
  void ClearGradients();
  /// Frees the gradient shard (the schedule's last use of it this step: an update whose ministage
  /// keeps no gradient shard between steps); the next reduction's output becomes the shard.
  void ReleaseGradShard() {
    grad_shard_ = torch::Tensor();
    grad_shard_zero_ = false;
  }

  /// Sets the owned part of AdamW's moments from whole-parameter moments (by parameter name), as a
  /// checkpoint holds them. Returns the first parameter missing from `exp_avg`, or "".
  std::string LoadMoments(const std::map<std::string, torch::Tensor>& exp_avg,
                          const std::map<std::string, torch::Tensor>& exp_avg_sq);

  // ---- Checkpoints ----
  /// The elements this rank's state owns, per parameter: [begin, begin + count) of the parameter's
  /// (tensor-parallel slice's) elements, with views of their master values and moments, wherever
  /// they are (synchronize the copy engine first). ZeRO-0 owns every element on every replica.
  struct OwnedPiece {
    size_t param;  // index into params()
    int64_t begin, count;
    torch::Tensor values, exp_avg, exp_avg_sq;
  };
  std::vector<OwnedPiece> OwnedPieces() const;
  /// Elements [begin, begin + count) of the flat parameter space, taken from whole parameters by
  /// name (an outer round's state, read back from a checkpoint). Returns the first parameter missing
  /// from `whole`, or "".
  std::string FlatRange(int64_t begin, int64_t count, const std::map<std::string, torch::Tensor>& whole,
                        torch::Tensor* out) const;
  /// The parameters' parts among flat values [begin, begin + count), in flat order: each one's name,
  /// where its part starts in the range, and its length (padding belongs to none).
  struct NamedPart {
    std::string name;
    int64_t in_range, count;
  };
  std::vector<NamedPart> PartsIn(int64_t begin, int64_t count) const;
  /// The same range between `flat` (its `count` values) and some parameters only (islands of unlike
  /// shapes exchange a fragment at a time): into `flat` from the parameters in `whole` (the other
  /// values untouched), or from `flat` into them (contiguous, each in its parameter's shape).
  void FlatRangeFrom(int64_t begin, const std::map<std::string, torch::Tensor>& whole,
                     torch::Tensor& flat) const;
  void FlatRangeInto(int64_t begin, const torch::Tensor& flat,
                     std::map<std::string, torch::Tensor>& whole) const;
  /// Swaps the first AdamW moment of the owned elements with `values` (its size), in place both ways:
  /// a checkpoint gathers another state of the same layout (an outer round's momentum) as a moment.
  void SwapFirstMoment(torch::Tensor& values);

  // ---- Offload ----
  bool on_host() const { return host_shard_.defined() && !shard_.defined(); }
  /// Shard and moments to host memory; the device copies are freed.
  void Offload();
  /// Shard (and the moments, with `with_moments`) back to the device.
  void Prefetch(bool with_moments);
  /// Drops the device copy of the shard (the host copy stays authoritative).
  void DropDeviceShard();
  /// The compute stream waits for the last prefetch of the shard (and of the moments with
  /// `moments`): a GPU's gather need not wait for the moments, which only the update reads.
  void WaitReady(bool moments) {
    copies_->Wait(shard_ready_);
    if (moments) copies_->Wait(moments_ready_);
  }
  /// True when no prefetch of the shard is still copying (asks the device; never waits).
  bool ShardArrived() const { return shard_ready_.finished(); }

 private:
  Status source_status_;
  struct Range {
    size_t param;        // index into params_
    int64_t flat_begin;  // where the parameter starts in the flat buffer
    int64_t numel;
    std::vector<int64_t> shape;
  };
  void PointParamsAt(const torch::Tensor& flat);

  std::vector<NamedParameter> params_;
  std::vector<Range> ranges_;
  // The parts of the parameters in `whole` among flat values [begin, begin + count): each parameter's
  // tensor, where the part starts in it and in the range, and its length.
  struct Overlap {
    torch::Tensor param;
    int64_t in_param, in_flat, count;
  };
  std::vector<Overlap> Overlaps(int64_t begin, int64_t count,
                                const std::map<std::string, torch::Tensor>& whole) const;
  int dp_size_ = 1, dp_index_ = 0;
  bool sharded_ = false;
  bool shard_in_flat_ = false;  // shard_ is a view of flat_
  CopyEngine* copies_;
  torch::Device device_;
  torch::Dtype dtype_ = torch::kFloat32;                 // the master dtype: the parameters' (fp32, or fp64)
  CopyTicket shard_ready_, moments_ready_, host_ready_;  // the last prefetches and the last offload
  CopyTicket shard_read_, moments_read_;  // the last prefetches again: they read the host copies
  int64_t numel_ = 0, shard_numel_ = 0, shard_begin_ = 0, padded_numel_ = 0;
  std::vector<int64_t> shard_counts_;  // uneven shares only
  torch::Tensor flat_, grad_flat_, shard_, grad_shard_, exp_avg_, exp_avg_sq_;
  bool grad_shard_zero_ = false;  // grad_shard_ holds zeros (ClearGradients, nothing added since)
  torch::Tensor host_shard_, host_exp_avg_, host_exp_avg_sq_;
};

}  // namespace motley
