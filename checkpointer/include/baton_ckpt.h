/* C ABI of libbaton-ckpt: the two-phase checkpointer for C programs and for Python through ctypes.
 *
 * Every function taking a handle is safe to call from the training thread; baton_ckpt_schedule may be
 * called from any thread. Functions returning int return 0 on success and -1 on failure, with the
 * reason in baton_ckpt_last_error(). Strings returned stay valid until the next call on the handle. */
#ifndef BATON_CKPT_H
#define BATON_CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct baton_ckpt baton_ckpt; /* opaque */

/* Measured figures of the most recent checkpoint and the running counters. */
typedef struct baton_ckpt_stats {
    uint64_t iteration;
    uint64_t bytes;
    double snapshot_seconds;
    double persist_seconds;
    double stall_seconds;
    int finished; /* persist ended */
    int committed;
    uint64_t requested;
    uint64_t committed_total;
    uint64_t failed_total;
    uint64_t dropped_requests;
} baton_ckpt_stats;

const char* baton_ckpt_version(void);

/* chain_dir NULL: read BATON_CHAIN_DIR and BATON_KEEP from the environment (and, for a world of several
 * ranks, the file-system coordinator of baton_ckpt_coord_from_env). keep <= 0: the default (2, or
 * BATON_KEEP). Returns NULL on error; baton_ckpt_last_error(NULL) says why. */
baton_ckpt* baton_ckpt_create(const char* chain_dir, int keep);
/* As baton_ckpt_create, with the permissions of the checkpoint files it creates (0600 there: private;
 * e.g. 0640 shares them with the group). Directories get the same bits plus search where read is set. */
baton_ckpt* baton_ckpt_create_with_mode(const char* chain_dir, int keep, unsigned file_mode);
/* Waits for an in-flight checkpoint, then frees everything. NULL is ignored. */
void baton_ckpt_destroy(baton_ckpt* ckpt);

int baton_ckpt_register_region(baton_ckpt* ckpt, const char* name, void* data, uint64_t size);
/* stream: the cudaStream_t the application updates the region on (NULL = default stream). */
int baton_ckpt_register_device_region(
    baton_ckpt* ckpt, const char* name, void* device_ptr, uint64_t size, int device, void* stream);
int baton_ckpt_unregister_region(baton_ckpt* ckpt, const char* name);
/* The bytes are copied; the latest value goes into every following checkpoint. */
int baton_ckpt_set_blob(baton_ckpt* ckpt, const char* name, const void* data, uint64_t size);
int baton_ckpt_set_epoch(baton_ckpt* ckpt, uint64_t epoch);
/* json_text: any JSON value, stored as top-level field `key` of every following manifest. */
int baton_ckpt_set_manifest_field(baton_ckpt* ckpt, const char* key, const char* json_text);

/* Hooks around the weight update. */
int baton_ckpt_after_update(baton_ckpt* ckpt, uint64_t iteration);
int baton_ckpt_before_update(baton_ckpt* ckpt);

/* Non-blocking: 1 = started, 0 = dropped (one is in flight; counted), -1 = error. */
int baton_ckpt_request(baton_ckpt* ckpt, uint64_t iteration);
/* Any thread: the next baton_ckpt_after_update starts a checkpoint. */
int baton_ckpt_schedule(baton_ckpt* ckpt);
/* Blocking: 0 = committed, -1 = failed (training may continue; the previous checkpoint is intact). */
int baton_ckpt_checkpoint_now(baton_ckpt* ckpt, uint64_t iteration);
/* Waits until nothing is in flight: 0 = the last checkpoint committed, -1 = it failed. */
int baton_ckpt_wait(baton_ckpt* ckpt);

/* 1 = restored (iteration in *iteration if not NULL), 0 = nothing to restore, -1 = error. */
int baton_ckpt_restore(baton_ckpt* ckpt, uint64_t* iteration);
/* After a restore: size of a restored blob, or -1 if there is none of that name. */
int64_t baton_ckpt_blob_size(baton_ckpt* ckpt, const char* name);
/* Copies up to capacity bytes of a restored blob; returns its full size, or -1 if there is none. */
int64_t baton_ckpt_get_blob(baton_ckpt* ckpt, const char* name, void* buffer, uint64_t capacity);
/* The restored manifest as JSON text ("null" before a successful restore). */
const char* baton_ckpt_restored_manifest(baton_ckpt* ckpt);
/* Why newer checkpoints were skipped by the last restore, one line each ("" if none). */
const char* baton_ckpt_restore_fallbacks(baton_ckpt* ckpt);

int baton_ckpt_get_stats(baton_ckpt* ckpt, baton_ckpt_stats* stats);

/* ---- Several ranks of one job (format version 2) ----
 * A coordinator carries the few collectives a multi-rank checkpoint needs. The file-system one needs no
 * framework: the ranks share the chain directory (one node or several). session: unique per launch of the
 * job and the same on all its ranks (e.g. "<SLURM_JOB_ID>.<SLURM_STEP_ID>"); timeout_seconds bounds every
 * wait (<= 0: 600). Returns NULL on error; baton_ckpt_last_error(NULL) says why. */
typedef struct baton_ckpt_coord baton_ckpt_coord; /* opaque */
baton_ckpt_coord* baton_ckpt_coord_create_file(
    const char* chain_dir, const char* session, int rank, int size, double timeout_seconds);
/* From BATON_RANK/BATON_WORLD_SIZE (or SLURM_PROCID/SLURM_NTASKS inside an srun step),
 * BATON_COORD_SESSION (or the Slurm job and step id) and BATON_COORD_TIMEOUT. A world of one process
 * gives a coordinator of rank 0 and size 1. */
baton_ckpt_coord* baton_ckpt_coord_from_env(const char* chain_dir);
/* A checkpointer holds its own reference: the coordinator may be destroyed after creating it. */
void baton_ckpt_coord_destroy(baton_ckpt_coord* coord);
int baton_ckpt_coord_rank(const baton_ckpt_coord* coord);
int baton_ckpt_coord_size(const baton_ckpt_coord* coord);
/* Collectives (every rank calls the same ones in the same order): 0 or -1 (a rank did not come in time). */
int baton_ckpt_coord_barrier(baton_ckpt_coord* coord, const char* key);
/* Root's bytes into buffer (up to capacity); returns their full size, or -1. */
int64_t baton_ckpt_coord_broadcast(baton_ckpt_coord* coord, const char* key, int root, const void* data,
    uint64_t size, void* buffer, uint64_t capacity);
const char* baton_ckpt_coord_last_error(const baton_ckpt_coord* coord);

/* As baton_ckpt_create, checkpointing together with the other ranks of coord (NULL: this process alone).
 * Collective: every rank creates its checkpointer, requests the same checkpoints and restores together. */
baton_ckpt* baton_ckpt_create_ranked(const char* chain_dir, int keep, baton_ckpt_coord* coord);

/* How a region's bytes relate across ranks: each rank's own (the default), the same on every rank
 * (written once, split across the ranks; restores on any world size), or this rank's [offset,
 * offset + size) of one array of global_size bytes split along its first dimension (restores on any
 * split). offset and global_size are read for BATON_CKPT_SHARDED only. */
enum { BATON_CKPT_PER_RANK = 0, BATON_CKPT_REPLICATED = 1, BATON_CKPT_SHARDED = 2 };
int baton_ckpt_set_region_layout(
    baton_ckpt* ckpt, const char* name, int layout, uint64_t offset, uint64_t global_size);
int baton_ckpt_rank(baton_ckpt* ckpt);
int baton_ckpt_world_size(baton_ckpt* ckpt);
/* The last error on this handle (or, with NULL, of the last failed create on this thread); "" if none. */
const char* baton_ckpt_last_error(baton_ckpt* ckpt);

#ifdef __cplusplus
}
#endif

#endif /* BATON_CKPT_H */
