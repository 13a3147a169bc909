/* amp_mpi.h — data-parallel training on MPI (libamprt_mpi, pkg-config amprt_mpi).
 *
 * The program calls MPI_Init, creates its context and its parameters as usual, then hands a
 * communicator to the context:
 *
 *     MPI_Init(&argc, &argv);
 *     amp_ctx_new(NULL, &ctx, err, sizeof err);
 *     ... amp_param_new ...
 *     amp_mpi_attach(ctx, MPI_COMM_WORLD);   // parameters broadcast from rank 0
 *     ... each rank trains on its shard: amp_backward + amp_optim_step as usual ...
 *     amp_ctx_free(ctx);
 *     MPI_Finalize();
 *
 * From then on amp_backward all-reduces the master gradients in buckets (allreduce_bucket_kb)
 * as it produces them, each summed by a ring of non-blocking point-to-point messages started in
 * one fixed order, so that the reduction overlaps the rest of backward and gives bit-identical
 * results from run to run for a given number of ranks and bucket size.  amp_backward returns
 * when the last bucket is summed: the gradients it leaves (amp_tensor_grad) are the sums over
 * the ranks, which the caller may read or change.  amp_optim_step divides by the number of
 * ranks, then unscales and checks: every rank sees the same sum, so an Inf or NaN on any rank
 * (or one the sum produced) makes every rank skip the step and back the loss scale off
 * together.  Parameters without a gradient on any rank whose values the forward pass moves
 * (BatchNorm's running statistics) are averaged over the ranks at the same point, so that every
 * rank keeps the same values.  allreduce_dtype = fp16 | bf16 sends the
 * scaled gradients in the half type (half the bytes of fp32) and adds them in FP32 on every
 * hop.
 *
 * The all-reduce is collective: every rank calls amp_optim_step in the same steps (a rank with
 * no data in a step calls it all the same; its gradient is then zero).  A step that runs
 * backward and ends without amp_optim_step completes the all-reduce in amp_step_end, and every
 * rank keeps the mean gradient, to which the next steps add, as one process keeps its
 * gradient; in such a step every rank runs backward, or none.
 *
 * Every rank must hold what decides the update alike: the settings (precision mode, custom
 * lists, loss scaling, gradient clipping and accumulation, the all-reduce's), the optimizers
 * (learning rates, update counts, the hyperparameters each update used) and the checkpoints
 * loaded (their training state; each rank may load its own file, whose RNG state and counters
 * are its own).  amp_mpi_attach compares them with rank 0's, and every step compares a
 * fingerprint of them at the end of backward at no extra collective (it rides on the NaN/Inf
 * counts' all-reduce): a rank that changed one alone (an amp_optim_set_lr, a checkpoint loaded
 * on one rank, another file loaded) makes the step fail on every rank with AMP_EINVAL, naming
 * the rank, what differs and both values, instead of training on silently or waiting forever.
 * A change to what the update reads (an optimizer's hyperparameters, gradient clipping, the
 * accumulation) made between amp_backward and amp_optim_step shows at the next step's
 * comparison, through a hash of every update's hyperparameters.
 * allreduce_dtype and allreduce_bucket_kb are set before attaching (AMP_ESTATE after).
 *
 * optimizer_sharding = on (also AMP_OPTIMIZER_SHARDING; set alike on every rank before
 * attaching) splits the update: the rings stop after their reduce-scatter hops, so that each
 * rank holds the sums of one share of every bucket; amp_optim_step unscales, checks, clips and
 * updates those elements only (the Inf/NaN verdict and the clipping norm summed over the
 * ranks), then every rank sends the values it updated to the others: the working copy the
 * forward pass reads (the master itself for a parameter without one, or one an op read in
 * FP32; the ranks agree on which, per parameter).  Each element's update is the same
 * arithmetic on the same sum, so the weights, losses and checkpoints are those of an unsharded
 * run, bit for bit (with gradient_clipping, to the rounding of the norm, whose squares are
 * summed per rank first); each rank streams half the optimizer's state a step (or a third,
 * with three ranks).  What changes: between
 * amp_backward and amp_optim_step a rank's gradients are the sums only in its share (a
 * change to a gradient counts there only); after an update a rank's masters and moments are
 * current only in its share, until amp_mpi_consolidate (collective) gathers them, which
 * amp_checkpoint_save and a use of such a master in another dtype ask for (they fail, naming
 * the parameter, before it).  A step with gradient accumulation, or with the master-gradient
 * statistics of ampprof's --nan-check=step, is not split (its rings complete, and masters a
 * split step left partial are gathered before its update), nor is one that ends without an
 * update.  A parameter of more than 2^29 elements turns sharding off for the context (the
 * profile's meta says optimizer_sharding off).
 *
 * Under ampprof each collective is a `comm` row (kind, bytes, dtype, bucket, duration, wait),
 * and the start-up barrier is what `ampprof merge` aligns the ranks' clocks on.
 */
#ifndef AMP_AMP_MPI_H
#define AMP_AMP_MPI_H

#include <mpi.h>

#include "amp/amp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes ctx data-parallel over comm (duplicated; every rank of comm calls it, collectively,
 * after creating the same parameters in the same order and before the first step):
 * a barrier, then every parameter broadcast from rank 0.  AMP_OK, or an error code with the
 * message in amp_ctx_error (parameters that differ in number or size across ranks, settings,
 * optimizers or checkpoints other than rank 0's, an MPI failure).  The context keeps the
 * communicator until amp_ctx_free, which must come before MPI_Finalize. */
int amp_mpi_attach(amp_ctx *ctx, MPI_Comm comm);
/* With optimizer_sharding on, gathers every parameter's master and optimizer moments, which
 * a sharded update leaves current on each rank only in the share it updated (the ranks
 * exchange the values the forward pass reads, not these): call it on every rank (it is
 * collective) before reading the masters, saving a checkpoint (amp_checkpoint_save refuses
 * before) or using a parameter in another dtype (refused before, naming it).  AMP_OK (also
 * without sharding: nothing to do), or an error code. */
int amp_mpi_consolidate(amp_ctx *ctx);
/* This process's rank and the number of ranks of the attached communicator (0 and 1 for a
 * context without one). */
int amp_mpi_rank(const amp_ctx *ctx);
int amp_mpi_size(const amp_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
