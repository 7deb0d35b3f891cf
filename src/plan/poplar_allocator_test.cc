#include "plan/poplar_allocator.h"

#include <gtest/gtest.h>
#include <cstdint>

#include "plan/monotone_spline.h"

namespace motley {
namespace {

// Time per microbatch proportional to its size: `per_sequence_s` seconds a sequence.
PoplarDeviceCurve Linear(int device, double per_sequence_s, int64_t max_microbatch) {
  PoplarDeviceCurve c;
  c.device = device;
  c.max_microbatch = max_microbatch;
  for (int b = 1; b <= 8; b *= 2) {
    c.sizes.push_back(b);
    c.times_s.push_back(b * per_sequence_s);
  }
  return c;
}

void ExpectDevice(const DevicePlan& d, int device, int64_t size, int64_t count, int64_t last) {
  EXPECT_EQ(d.device, device);
  EXPECT_EQ(d.microbatch_size, size) << "device " << device;
  EXPECT_EQ(d.num_microbatches, count) << "device " << device;
  EXPECT_EQ(d.last_microbatch_size, last) << "device " << device;
}

TEST(MonotoneSpline, InterpolatesWithoutOvershoot) {
  MonotoneSpline s({1, 2, 4, 8}, {1, 1.67, 2.5, 2.5});
  EXPECT_DOUBLE_EQ(s(2), 1.67);
  EXPECT_DOUBLE_EQ(s(0.5), 1);  // flat outside the points
  EXPECT_DOUBLE_EQ(s(16), 2.5);
  for (double x = 1; x < 8; x += 0.01) {
    EXPECT_LE(s(x), s(x + 0.01) + 1e-12) << x;  // monotone data, monotone curve
    EXPECT_LE(s(x), 2.5 + 1e-12);               // no overshoot on the plateau
  }
}

TEST(PoplarAllocator, Zero01SplitsByPeakSpeedAndGivesTheRemainderToWhoFinishesFirst) {
  // Device 0: 1 sequence/s; device 1: 3 sequences/s; both flat, up to 4 sequences.
  std::vector<PoplarDeviceCurve> curves = {Linear(0, 1.0, 4), Linear(1, 1.0 / 3, 4)};
  PoplarAllocation a = PoplarAllocate(curves, 0, 12, 0.5).value();
  // 12 sequences at 4 sequences/s: 3 s; shares 3 and 9, cut into microbatches of the best size
  // (4, the largest at peak speed): 3 = one of 3; 9 = 4 + 4 + 1.
  ExpectDevice(a.devices[0], 0, 3, 1, 0);
  ExpectDevice(a.devices[1], 1, 4, 3, 1);
  EXPECT_NEAR(a.predicted_step_s, 3 + 0.5, 1e-9);
  // 13: the 13th sequence goes to device 1 (10/3 s < 4 s).
  PoplarAllocation b = PoplarAllocate(curves, 1, 13, 0.5).value();
  EXPECT_EQ(b.devices[0].sequences(), 3);
  EXPECT_EQ(b.devices[1].sequences(), 10);
}

TEST(PoplarAllocator, Zero01UsesEachDevicesBestMicrobatch) {
  // Device 0 speeds up with larger microbatches (1, 1.67, 2.5, 3.33 sequences/s at 1, 2, 4, 8) but
  // only 4 fit; device 1 is flat at 1 sequence/s.
  PoplarDeviceCurve fast;
  fast.device = 0;
  fast.max_microbatch = 4;
  fast.sizes = {1, 2, 4, 8};
  fast.times_s = {1, 1.2, 1.6, 2.4};
  PoplarAllocation a = PoplarAllocate({fast, Linear(1, 1.0, 8)}, 0, 35, 0).value();
  // Peak speeds 2.5 (at 4) and 1: shares 25 and 10.
  ExpectDevice(a.devices[0], 0, 4, 7, 1);  // 25 = 6 x 4 + 1
  ExpectDevice(a.devices[1], 1, 8, 2, 2);  // 10 = 8 + 2
}

TEST(PoplarAllocator, Zero23SearchesTheStepTime) {
  // Device 0: 1 s per sequence, device 1: 1/3 s; up to 4 sequences; 0.5 s of communication per
  // accumulation step. Candidates t: 1/3 -> 12 steps x 0.83 = 10; 2/3 -> 6 x 1.17 = 7;
  // 1 -> (1 + 3) a step, 3 x 1.5 = 4.5 (best); 4/3 -> (1 + 4), 3 x 1.83; 2 -> (2 + 4), 2 x 2.5 = 5; ...
  std::vector<PoplarDeviceCurve> curves = {Linear(0, 1.0, 4), Linear(1, 1.0 / 3, 4)};
  PoplarAllocation a = PoplarAllocate(curves, 2, 12, 0.5).value();
  EXPECT_EQ(a.accumulation_steps, 3);
  ExpectDevice(a.devices[0], 0, 1, 3, 0);
  ExpectDevice(a.devices[1], 1, 3, 3, 0);
  EXPECT_NEAR(a.predicted_step_s, 4.5, 1e-9);
  // 11 sequences: same t, the last step holds 3 = 1 + 2.
  PoplarAllocation b = PoplarAllocate(curves, 3, 11, 0.5).value();
  EXPECT_EQ(b.accumulation_steps, 3);
  ExpectDevice(b.devices[0], 0, 1, 3, 0);
  ExpectDevice(b.devices[1], 1, 3, 3, 2);
  EXPECT_EQ(b.devices[0].sequences() + b.devices[1].sequences(), 11);
}

TEST(PoplarAllocator, Zero23LargeCommunicationPrefersFewerSteps) {
  // With 10 s per synchronisation the fewest steps win: t = 4 takes 4 + 4 = 8 sequences a step.
  std::vector<PoplarDeviceCurve> curves = {Linear(0, 1.0, 4), Linear(1, 1.0 / 3, 4)};
  PoplarAllocation a = PoplarAllocate(curves, 2, 16, 10).value();
  EXPECT_EQ(a.accumulation_steps, 2);
  EXPECT_EQ(a.devices[0].microbatch_size, 4);
  EXPECT_EQ(a.devices[1].microbatch_size, 4);
}

TEST(PoplarAllocator, NoRoomForOneSequenceIsOutOfMemory) {
  std::vector<PoplarDeviceCurve> curves = {Linear(0, 1.0, 4), Linear(7, 1.0, 0)};
  Result<PoplarAllocation> a = PoplarAllocate(curves, 1, 8, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(a.status().message().find("device 7: a microbatch of 1 sequence does not fit at ZeRO-1"),
            std::string::npos);
}

}  // namespace
}  // namespace motley
