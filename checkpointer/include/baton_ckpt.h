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

/* chain_dir NULL: read BATON_CHAIN_DIR and BATON_KEEP from the environment. keep <= 0: the default (2,
 * or BATON_KEEP). Returns NULL on error; baton_ckpt_last_error(NULL) says why. */
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
/* The last error on this handle (or, with NULL, of the last failed create on this thread); "" if none. */
const char* baton_ckpt_last_error(baton_ckpt* ckpt);

#ifdef __cplusplus
}
#endif

#endif /* BATON_CKPT_H */
