/* C interface of baton's checkpoint session: the checkpointer driven by its policy (profiled and
 * adaptive interval, final checkpoint before the deadline, SIGUSR1/SIGTERM, sampler and tuning state in
 * every manifest). Functions returning int give 0 on success and -1 on error unless said otherwise; the
 * message is then in baton_session_last_error() (per thread). */
#ifndef BATON_SESSION_H
#define BATON_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "baton_ckpt.h"
#include "baton_sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct baton_session baton_session;

/* chain_dir NULL: every setting from BATON_* (BATON_CHAIN_DIR required; BATON_HANDOVER_WAIT too). Otherwise
 * chain_dir, with BATON_OVERHEAD, BATON_DEADLINE and BATON_DEADLINE_MARGIN still read from the environment
 * (and BATON_JOB_ID, BATON_CHAIN_SEQ recorded in the manifests).
 * overhead_percent > 0 overrides BATON_OVERHEAD; handle_signals != 0 installs the SIGUSR1/SIGTERM
 * handlers. NULL on error. */
baton_session* baton_session_create(const char* chain_dir, double overhead_percent, int handle_signals);
/* Drives a checkpointer made with baton_ckpt_create (registrations, blobs and device regions through
 * baton_ckpt_*), which must outlive the session. BATON_OVERHEAD, BATON_DEADLINE and
 * BATON_DEADLINE_MARGIN are read from the environment; overhead_percent > 0 overrides the first. */
baton_session* baton_session_create_for(baton_ckpt* ckpt, double overhead_percent, int handle_signals);
/* Waits for an in-flight checkpoint. */
void baton_session_destroy(baton_session* session);

int baton_session_register_region(baton_session* session, const char* name, void* data, size_t size);
int baton_session_set_blob(baton_session* session, const char* name, const void* data, size_t size);
/* The sampler's state rides in every manifest and is restored by baton_session_restore(). The sampler
 * must outlive the session; NULL detaches it. */
int baton_session_attach_sampler(baton_session* session, baton_sampler* sampler);
/* Deadline in epoch seconds; 0 removes it. */
int baton_session_set_deadline(baton_session* session, double epoch_seconds);

/* 1 restored (iteration in *iteration), 0 nothing to restore, -1 error. Blobs are copied into
 * baton_session_blob(). In a successor job with BATON_HANDOVER_WAIT it first waits for the predecessor's
 * final checkpoint. */
int baton_session_restore(baton_session* session, uint64_t* iteration);
/* Seconds the last baton_session_restore() waited for the predecessor's final checkpoint. */
double baton_session_handover_wait_seconds(const baton_session* session);
/* Size of a restored blob, copying it into buffer when capacity suffices; -1 when there is none. */
int64_t baton_session_blob(const baton_session* session, const char* name, void* buffer, size_t capacity);

/* Checkpoint at the next step; exit_after != 0 makes it final (should_exit once it commits). */
int baton_session_request_checkpoint(baton_session* session, int exit_after);

int baton_session_before_update(baton_session* session);
/* At the end of iteration `iteration`: 1 a checkpoint started, 0 none, -1 error. */
int baton_session_step(baton_session* session, uint64_t iteration);
/* Waits for an in-flight checkpoint. After baton_session_mark_training_done() it commits a final checkpoint
 * with training_done (-1 if that fails). */
int baton_session_finish(baton_session* session);
/* The training is complete: the final checkpoint (baton_session_finish(), or destroy) carries
 * training_done, which ends the chain. */
int baton_session_mark_training_done(baton_session* session);

int baton_session_should_exit(const baton_session* session);
uint64_t baton_session_interval(const baton_session* session);
double baton_session_overhead_percent(const baton_session* session);

const char* baton_session_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
