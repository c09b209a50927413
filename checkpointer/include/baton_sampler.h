/* C interface of baton's resumable sampler: a deterministic, sharded data order that resumes from
 * (epoch, position) in O(1). Functions returning int give 0 on success and -1 on error; the message is
 * then in baton_sampler_last_error() (per thread). */
#ifndef BATON_SAMPLER_H
#define BATON_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct baton_sampler baton_sampler;

/* NULL on bad arguments (size 0, rank >= ranks, ...). drop_last: see README (0 pads, 1 drops). */
baton_sampler* baton_sampler_create(
    uint64_t size, uint64_t seed, uint64_t ranks, uint64_t rank, int drop_last);
/* From the JSON object stored in a manifest's "sampler" field; NULL on malformed input. */
baton_sampler* baton_sampler_from_json(const char* json);
void baton_sampler_destroy(baton_sampler* sampler);

int baton_sampler_next(baton_sampler* sampler, uint64_t* index);
/* Fills out[0..count) with the next count indices. */
int baton_sampler_next_many(baton_sampler* sampler, uint64_t* out, size_t count);
int baton_sampler_index_at(const baton_sampler* sampler, uint64_t epoch, uint64_t position, uint64_t* index);
/* position counts from the epoch's beginning (an offset left by a reshard no longer applies). */
int baton_sampler_seek(baton_sampler* sampler, uint64_t epoch, uint64_t position);
/* Continues where a saved state (a manifest's "sampler" object) left off, on this sampler's world size
 * and rank: with another number of ranks, the saved ranks' consumed part of the epoch (they took it in
 * lockstep) stays done and this world shares the rest. -1 (sampler unchanged) for a state of another
 * size, seed or drop_last, or one that cannot be mapped. */
int baton_sampler_resume(baton_sampler* sampler, const char* state_json);

uint64_t baton_sampler_epoch(const baton_sampler* sampler);
uint64_t baton_sampler_position(const baton_sampler* sampler);
uint64_t baton_sampler_samples_per_epoch(const baton_sampler* sampler);
/* This rank's samples in the current epoch: fewer than samples_per_epoch after a reshard. */
uint64_t baton_sampler_samples_in_epoch(const baton_sampler* sampler);

/* Writes the state as a NUL-terminated JSON object into buffer if it fits in capacity bytes; returns
 * the length without the NUL either way (call with capacity 0 to size the buffer). */
size_t baton_sampler_state_json(const baton_sampler* sampler, char* buffer, size_t capacity);

const char* baton_sampler_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
