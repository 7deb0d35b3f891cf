#include "runtime/model/cross_entropy.h"

#include <iostream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/model.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/llama_model.h"

namespace motley {
namespace {

torch::Tensor LibraryLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

TEST(CrossEntropy, EqualsTheLibrarysLossAndGradient) {
  torch::manual_seed(3);
  const torch::Tensor logits = (torch::randn({3, 5, 40}, torch::kFloat64) * 4).requires_grad_(true);
  const torch::Tensor targets = torch::randint(0, 40, {3, 5});
  const torch::Tensor want = LibraryLoss(logits, targets);
  const torch::Tensor want_grad = torch::autograd::grad({want}, {logits})[0];
  const torch::Tensor got = CrossEntropyLoss(logits, targets);
  const torch::Tensor got_grad = torch::autograd::grad({got}, {logits})[0];
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-13);
  EXPECT_LT((got_grad - want_grad).abs().max().item<double>(), 1e-15);
  EXPECT_EQ(got_grad.scalar_type(), torch::kFloat64);
}

// A team's ranks each compute from their columns; the three figures a token they gather give every
// rank the whole loss, and the gradients of their columns join into the whole gradient. Here two
// "ranks" in one process: the first pass records what each would send, the second gathers them.
// The last rank's columns end in padding (a vocabulary of 37 in two slices of 20).
TEST(CrossEntropy, ATeamsColumnsGiveTheWholeLossAndGradient) {
  torch::manual_seed(4);
  const int64_t vocab = 37, slice = 20;
  const torch::Tensor whole = torch::randn({2, 6, vocab}, torch::kFloat64) * 3;
  const torch::Tensor targets = torch::randint(0, vocab, {2, 6});
  const torch::Tensor padded =
      torch::cat({whole, torch::full({2, 6, 2 * slice - vocab}, 50.0, torch::kFloat64)}, 2);
  const torch::Tensor leaf = whole.clone().requires_grad_(true);
  const torch::Tensor want = LibraryLoss(leaf, targets);
  const torch::Tensor want_grad = torch::autograd::grad({want}, {leaf})[0];
  std::vector<torch::Tensor> sent(2);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<torch::Tensor> grads;
    for (int r = 0; r < 2; ++r) {
      const TeamGather gather = [&](const torch::Tensor& parts) {
        if (pass == 0) sent[r] = parts.clone();
        return pass == 0 ? parts.unsqueeze(0) : torch::stack(sent);
      };
      const torch::Tensor columns = padded.narrow(2, r * slice, slice).clone().requires_grad_(true);
      const torch::Tensor loss = CrossEntropyLoss(columns, targets, r * slice, vocab - r * slice, &gather);
      grads.push_back(torch::autograd::grad({loss}, {columns})[0]);
      if (pass == 1) {
        EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-13) << "rank " << r;
      }
    }
    if (pass == 0) continue;
    const torch::Tensor joined = torch::cat(grads, 2);
    EXPECT_LT((joined.narrow(2, 0, vocab) - want_grad).abs().max().item<double>(), 1e-15);
    EXPECT_EQ(joined.narrow(2, vocab, 2 * slice - vocab).abs().max().item<double>(), 0)
        << "padding has no gradient";
  }
}

// A rank holding only padded columns (a 3-wide team over a 256-token vocabulary padded to 384):
// nothing of its own, the team's loss all the same.
TEST(CrossEntropy, ARankOfOnlyPaddingAddsNothing) {
  torch::manual_seed(5);
  const torch::Tensor logits = torch::randn({4, 8}, torch::kFloat64);
  const torch::Tensor targets = torch::randint(0, 8, {4});
  torch::Tensor sent;
  const TeamGather alone = [&](const torch::Tensor& parts) {
    sent = parts.clone();
    return parts.unsqueeze(0);
  };
  CrossEntropyLoss(logits, targets, 0, -1, &alone);
  const torch::Tensor empty = torch::randn({4, 5}, torch::kFloat64).requires_grad_(true);
  torch::Tensor padding_parts;
  const TeamGather record = [&](const torch::Tensor& parts) {
    padding_parts = parts.clone();
    return torch::stack({sent, parts});
  };
  const torch::Tensor loss = CrossEntropyLoss(empty, targets, 8, 0, &record);
  EXPECT_NEAR(loss.item<double>(), LibraryLoss(logits, targets).item<double>(), 1e-13);
  EXPECT_EQ(torch::autograd::grad({loss}, {empty})[0].abs().max().item<double>(), 0);
  EXPECT_EQ(padding_parts.select(0, 1).abs().max().item<double>(), 0) << "its sums are 0";
}

// What the loss holds, counted by the memory ledger: its forward adds one master-precision copy of
// the logits (core/model.h: LogitsBytesPerToken, with the logits themselves), keeps it as the
// softmax, and its backward turns that into the gradient in place — plus a cast to the logits'
// dtype when it is lower (bf16 logits here). The library's cross_entropy, for comparison, holds 4x
// as much at its backward's peak in fp32.
TEST(CrossEntropy, HoldsOneMasterCopyOfTheLogits) {
  MemoryLedger& ledger = MemoryLedger::Install();
  ModelSpec spec;
  spec.vocab_size = 4096;
  const int64_t tokens = 256;
  for (Precision p : {Precision::kFp32, Precision::kFp64, Precision::kBf16}) {
    const std::string where(PrecisionName(p));
    const torch::Dtype dtype = p == Precision::kFp64   ? torch::kFloat64
                               : p == Precision::kBf16 ? torch::kBFloat16
                                                       : torch::kFloat32;
    torch::Tensor logits =
        torch::randn({tokens, spec.vocab_size}, torch::kFloat32).to(dtype).requires_grad_(true);
    const torch::Tensor targets = torch::randint(0, spec.vocab_size, {tokens});
    const int64_t before = ledger.used_bytes() - logits.nbytes();
    ledger.ResetPeak();
    torch::Tensor loss = CrossEntropyLoss(logits, targets);
    const double forward = static_cast<double>(ledger.peak_bytes() - before);
    const double want_forward = LogitsBytesPerToken(spec, p) * tokens;
    EXPECT_NEAR(forward, want_forward, 0.03 * want_forward)
        << where << ": forward " << forward / want_forward << "x";
    const double kept = static_cast<double>(ledger.used_bytes() - before - logits.nbytes());
    const double want_kept = LossSavedBytesPerToken(spec, p) * tokens;
    EXPECT_NEAR(kept, want_kept, 0.03 * want_kept) << where << ": kept " << kept / want_kept << "x";
    ledger.ResetPeak();
    torch::autograd::grad({loss}, {logits});
    const double backward = static_cast<double>(ledger.peak_bytes() - before - logits.nbytes());
    const double c = BytesPerElement(p), master = BytesPerElement(MasterPrecision(p));
    const double want_backward = want_kept + (c < master ? c : 0) * spec.vocab_size * tokens;
    EXPECT_NEAR(backward, want_backward, 0.03 * want_backward)
        << where << ": backward " << backward / want_backward << "x";
    if (p == Precision::kFp32) {
      ledger.ResetPeak();
      const torch::Tensor library = LibraryLoss(logits, targets);
      torch::autograd::grad({library}, {logits});
      const double library_peak = static_cast<double>(ledger.peak_bytes() - before - logits.nbytes());
      EXPECT_GT(library_peak, 2.5 * want_backward) << "the library's loss, for comparison";
      std::cout << "fp32, " << spec.vocab_size << " columns: the library's loss peaks at "
                << library_peak / tokens << " bytes a token in its backward, this one at "
                << backward / tokens << "\n";
    }
  }
}

// The head's piece of a checkpointed backward — the final norm, the head and the loss recomputed
// from the last boundary, then differentiated — against HeadBackwardBytesPerToken (its weights'
// gradients aside, which a schedule counts as gradients).
TEST(CrossEntropy, TheHeadsPieceIsWhatTheMemoryModelCounts) {
  MemoryLedger& ledger = MemoryLedger::Install();
  ModelSpec spec = *FindModelPreset("llama-1m");
  spec.vocab_size = 4096;
  LlamaModel model(spec, 1);
  const int layers = static_cast<int>(spec.num_layers);
  for (Precision p : {Precision::kFp32, Precision::kFp64}) {
    const torch::Dtype dtype = p == Precision::kFp64 ? torch::kFloat64 : torch::kFloat32;
    model->to(dtype);
    const int64_t batch = 4, seq = 64;
    const torch::Tensor x = torch::randn({batch, seq, spec.hidden_size}, dtype).requires_grad_(true);
    const torch::Tensor targets = torch::randint(0, spec.vocab_size, {batch, seq});
    std::vector<torch::Tensor> inputs{x};
    for (const auto& w : model->parameters()) inputs.push_back(w);
    const int64_t before = ledger.used_bytes();
    ledger.ResetPeak();
    int64_t weight_grads = 0;  // the norm's and the head's
    double forward = 0, backward = 0;
    {
      torch::Tensor loss =
          model->Loss(model->Run(ModelSlice{false, layers, layers, true}, x, false), targets);
      forward = static_cast<double>(ledger.peak_bytes() - before);
      ledger.ResetPeak();
      const std::vector<torch::Tensor> grads = torch::autograd::grad({loss}, inputs, {}, false, false, true);
      for (size_t i = 1; i < grads.size(); ++i)
        if (grads[i].defined()) weight_grads += grads[i].nbytes();
      backward = static_cast<double>(ledger.peak_bytes() - before - weight_grads);
    }
    const double peak = std::max(forward, backward);
    const double want = HeadBackwardBytesPerToken(spec, p) * batch * seq;
    EXPECT_NEAR(peak, want, 0.05 * want) << PrecisionName(p) << ": measured " << peak / want << "x (forward "
                                         << forward / want << "x, backward " << backward / want << "x)";
  }
}

}  // namespace
}  // namespace motley
