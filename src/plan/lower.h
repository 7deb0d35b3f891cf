// Lowering: Plan -> Schedule, one op program per rank.
//
// How each kind of plan is lowered (the runtime executes exactly this):
//  * Order. Work is first ordered globally — per group, a sequence of forward and backward tasks
//    (ministage, microbatch), timed by a unit-cost run of the whole pipeline — and each rank's
//    program is its share of that one global order. Sends never block and every recv comes after
//    its send in the global order, so no schedule can deadlock.
//      - gpipe / interleaved: a group runs its ministages one after another, each over all its
//        microbatches (GPipe order inside a ministage), forward in layer order then backward in
//        reverse (Zorse §4.1; with one ministage per group this is plain GPipe).
//      - 1f1b: each device (or tensor-parallel run) of group g alternates one forward and one
//        backward of its own microbatches after a warm-up of (groups - 1 - g) of them (a routing
//        whose devices could wait on each other that way keeps a stage-wide window: pipeline_order.h).
//      - one group, not interleaved (data parallelism, Poplar): every device runs its own
//        microbatches, forward then backward, in step with the others by microbatch index.
//  * Parameters (per ministage). ZeRO 0-2: full parameters stay on the device; ZeRO-1/2
//    all-gather them after the sharded optimizer step. ZeRO-3 in data parallelism: all-gather
//    before every forward and backward of every microbatch index, freed after, the next
//    ministage's gather issued before this one computes (prefetch: at most two gathered); the
//    last ministage turns around from forward to backward with its parameters in place. Pipelines with ZeRO-3
//    or offload_params: all-gathered once per ministage per pass; with offload_params the shard lives on the
//    host and is prefetched, at most two ministages resident (the current and the next). The next visit's
//    prefetch and gather follow each rank's own first task of the current visit (so alike ranks keep
//    alike programs), never before the visit before has finished on every rank of the group.
//  * Gradients. ZeRO-0: all-reduce once per step; ZeRO-1: reduce-scatter once per step.
//    ZeRO-2/3 in data parallelism: reduce-scatter after every microbatch index (a device that has
//    run out of microbatches contributes zeros, as in Poplar's last step). ZeRO-2/3 in pipelines (Zorse):
//    reduce-scatter once per ministage per step, right after its backward, followed at once by
//    that ministage's optimizer step (interleaved updates).
//  * Gradient clipping (Plan::gradient_clipping, the default). The updates need the global norm:
//    on every rank the optimizer steps, and the all-gathers and parameter offloads that follow an
//    update, move after one grad_norm collective over every rank (the squared norm and the loss,
//    summed), which waits for the rank's gradient reductions. So the gradients and, with offload,
//    the shards of every ministage stay until the end of the step; the reductions overlap the
//    backward of the next ministage instead of holding it. Without clipping the updates are
//    interleaved as above.
//  * Activations. With checkpointing a forward keeps each layer's input (the layer boundaries) and
//    the backward recomputes the rest; offload_activations copies those boundaries to the host
//    after the forward and back before the backward, one microbatch ahead.
//  * Buffers (schedule.h: Op::reads, writes, frees; Program::resident). Every op names what it uses
//    of the rank's state, and the lowering adds the deps those buffers imply, so the simulator (ops
//    start when their deps allow) and the runtime (program order, hazards waited for) run the same
//    data flow; the executors follow these and never read the plan.
#pragma once

#include <functional>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/lower_options.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace motley {

Result<Schedule> LowerPlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model,
                           const LowerOptions& options = {});

/// Two programs alike op for op — what LowerOptions::device_class lets one program stand for (its
/// microbatches renumbered by first appearance, static memory included).
bool AlikePrograms(const Program& a, const Program& b);

}  // namespace motley
