// TransferOrder: whether a schedule runs on a backend that matches transfers in the order they
// are issued — NCCL, motley's GPU backend — and not only on Gloo, which matches a send to its
// receive by tag.
//
// NCCL (and ProcessGroupNCCL over it) works differently from Gloo in three ways that a schedule
// sound on Gloo can trip over:
//  - matching: the k-th send from rank a to rank b meets b's k-th receive from a, whatever their
//    tags; a group's collectives meet in the order each member issues them. Issued in another
//    order, a transfer silently delivers another microbatch's tensor (or hangs when sizes differ).
//  - streams: each pair of ranks has one communicator and one stream for both directions, each
//    group one for its collectives; an operation starts after the one before it on that stream.
//    A large send does not finish before its receive is posted (NCCL's buffers are a few MB).
//  - issue: an operation's stream first waits for everything already queued on the rank's compute
//    stream (ProcessGroupNCCL syncs with the current stream), and a device-to-host copy waits for
//    it too (CopyEngine::ToHost).
// CheckTransferOrder replays every rank's program in program order under those rules, with every
// op taking no time, and reports the first transfer that would meet the wrong partner or the set
// of ranks that would wait for each other forever.
#pragma once

#include <string>

#include "plan/schedule.h"

namespace motley {

/// "" when the schedule runs under in-order matching (NCCL), else the first problem, naming the
/// ranks, ops and tags.
std::string CheckTransferOrder(const Schedule& s);

}  // namespace motley
