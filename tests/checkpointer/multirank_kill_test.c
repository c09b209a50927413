/* Four ranks (processes) checkpoint one chain through the file-system coordinator while the test kills
 * them: one rank at a random moment, the rest a few milliseconds later (as srun tears a step down). The
 * next launch restores. Every launch's four ranks must restore the same iteration, each rank's state
 * must be exactly that iteration's (replicated, sharded and per-rank regions and a blob), and the
 * restored iteration never goes back: a committed checkpoint is never lost or mixed with another. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "baton_ckpt.h"

enum { RANKS = 4, ROUNDS = 16, REPLICATED_BYTES = 300000, SHARD_BYTES = 70000, OWN_BYTES = 4096 };

static char chain[512];
static char results[512];

static uint8_t value(uint64_t iteration, uint64_t index, int salt)
{
    uint64_t x = iteration * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xC2B2AE3D27D4EB4Full ^ (uint64_t)salt;
    x ^= x >> 29;
    return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static void fill(uint8_t* replicated, uint8_t* shard, uint8_t* own, int rank, uint64_t iteration)
{
    for (uint64_t i = 0; i < REPLICATED_BYTES; ++i)
        replicated[i] = value(iteration, i, 1);
    for (uint64_t i = 0; i < SHARD_BYTES; ++i)
        shard[i] = value(iteration, (uint64_t)rank * SHARD_BYTES + i, 2);
    for (uint64_t i = 0; i < OWN_BYTES; ++i)
        own[i] = value(iteration, i, 100 + rank);
}

static int matches(
    const uint8_t* replicated, const uint8_t* shard, const uint8_t* own, int rank, uint64_t iteration)
{
    for (uint64_t i = 0; i < REPLICATED_BYTES; ++i)
        if (replicated[i] != value(iteration, i, 1))
            return 0;
    for (uint64_t i = 0; i < SHARD_BYTES; ++i)
        if (shard[i] != value(iteration, (uint64_t)rank * SHARD_BYTES + i, 2))
            return 0;
    for (uint64_t i = 0; i < OWN_BYTES; ++i)
        if (own[i] != value(iteration, i, 100 + rank))
            return 0;
    return 1;
}

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "rank %d: ", rank);                                                              \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            _exit(2);                                                                                        \
        }                                                                                                    \
    } while (0)

/* The newest committed checkpoint's iteration in the chain (-1: none). A committed checkpoint is a
 * directory named ckpt-<digits>; one being written has a leading dot. */
static long long newest_committed(void)
{
    long long newest = -1;
    DIR* dir = opendir(chain);
    if (dir == NULL)
        return newest;
    for (struct dirent* e; (e = readdir(dir)) != NULL;) {
        char* end = NULL;
        if (strncmp(e->d_name, "ckpt-", 5) != 0)
            continue;
        long long iteration = strtoll(e->d_name + 5, &end, 10);
        if (end != e->d_name + 5 && *end == '\0' && iteration > newest)
            newest = iteration;
    }
    closedir(dir);
    return newest;
}

/* One rank of one launch: restore, report, then train `run` iterations, checkpointing every one. */
static void rank_main(int round, int rank, uint64_t run)
{
    char session[64];
    snprintf(session, sizeof session, "launch-%d-%d", round, (int)getppid());
    baton_ckpt_coord* coord = baton_ckpt_coord_create_file(chain, session, rank, RANKS, 30);
    CHECK(coord != NULL, "coordinator: %s", baton_ckpt_last_error(NULL));
    /* The coordinator's own collectives: rank 0's bytes reach every rank. */
    CHECK(baton_ckpt_coord_rank(coord) == rank && baton_ckpt_coord_size(coord) == RANKS,
        "coordinator rank/size");
    CHECK(baton_ckpt_coord_barrier(coord, "start") == 0, "barrier: %s", baton_ckpt_coord_last_error(coord));
    char token[32] = "", sent[32];
    snprintf(sent, sizeof sent, "launch %d", round);
    int64_t got_bytes = baton_ckpt_coord_broadcast(
        coord, "token", 0, rank == 0 ? sent : NULL, rank == 0 ? strlen(sent) : 0, token, sizeof token - 1);
    CHECK(got_bytes == (int64_t)strlen(sent) && strcmp(token, sent) == 0, "broadcast gave '%s' (%lld): %s",
        token, (long long)got_bytes, baton_ckpt_coord_last_error(coord));
    baton_ckpt* ckpt = baton_ckpt_create_ranked(chain, 2, coord);
    CHECK(ckpt != NULL, "create: %s", baton_ckpt_last_error(NULL));
    baton_ckpt_coord_destroy(coord); /* the checkpointer keeps its own reference */
    CHECK(baton_ckpt_rank(ckpt) == rank && baton_ckpt_world_size(ckpt) == RANKS, "rank/size");

    static uint8_t replicated[REPLICATED_BYTES], shard[SHARD_BYTES], own[OWN_BYTES];
    CHECK(baton_ckpt_register_region(ckpt, "weights", replicated, REPLICATED_BYTES) == 0, "register");
    CHECK(baton_ckpt_set_region_layout(ckpt, "weights", BATON_CKPT_REPLICATED, 0, 0) == 0, "layout: %s",
        baton_ckpt_last_error(ckpt));
    CHECK(baton_ckpt_register_region(ckpt, "moments", shard, SHARD_BYTES) == 0, "register");
    CHECK(baton_ckpt_set_region_layout(ckpt, "moments", BATON_CKPT_SHARDED, (uint64_t)rank * SHARD_BYTES,
              (uint64_t)RANKS * SHARD_BYTES)
            == 0,
        "layout: %s", baton_ckpt_last_error(ckpt));
    CHECK(baton_ckpt_register_region(ckpt, "rng", own, OWN_BYTES) == 0, "register");

    uint64_t restored = 0;
    int got = baton_ckpt_restore(ckpt, &restored);
    CHECK(got >= 0, "restore: %s", baton_ckpt_last_error(ckpt));
    uint64_t start = 0;
    if (got == 1) {
        CHECK(matches(replicated, shard, own, rank, restored), "restored state is not iteration %llu's",
            (unsigned long long)restored);
        uint64_t step = 0;
        CHECK(baton_ckpt_get_blob(ckpt, "step", &step, sizeof step) == sizeof step && step == restored,
            "blob 'step' is %llu, restored iteration %llu", (unsigned long long)step,
            (unsigned long long)restored);
        start = restored + 1;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/%d-%d", results, round, rank);
    FILE* out = fopen(path, "w");
    CHECK(out != NULL, "cannot write %s", path);
    fprintf(out, "%d %llu\n", got, (unsigned long long)restored);
    fclose(out);

    for (uint64_t it = start; it < start + run; ++it) {
        baton_ckpt_before_update(ckpt);
        fill(replicated, shard, own, rank, it);
        CHECK(baton_ckpt_set_blob(ckpt, "step", &it, sizeof it) == 0, "blob");
        baton_ckpt_after_update(ckpt, it);
        CHECK(baton_ckpt_request(ckpt, it) >= 0, "request: %s", baton_ckpt_last_error(ckpt));
    }
    CHECK(baton_ckpt_wait(ckpt) == 0, "last checkpoint: %s", baton_ckpt_last_error(ckpt));
    baton_ckpt_destroy(ckpt);
    _exit(0);
}

static int read_result(int round, int rank, int* got, unsigned long long* iteration)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%d-%d", results, round, rank);
    FILE* in = fopen(path, "r");
    if (in == NULL)
        return 0;
    int ok = fscanf(in, "%d %llu", got, iteration) == 2;
    fclose(in);
    return ok;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits (60 s at most) until every rank of the launch has reported its restore; 0, or 1 (a failure). */
static int wait_restored(int round, int got[], unsigned long long restored[])
{
    double limit = now() + 60;
    int reported = 0;
    while (reported < RANKS && now() < limit) {
        reported = 0;
        for (int r = 0; r < RANKS; ++r)
            reported += read_result(round, r, &got[r], &restored[r]);
        usleep(2000);
    }
    if (reported < RANKS) {
        fprintf(stderr, "round %d: not every rank restored within 60 s\n", round);
        return 1;
    }
    return 0;
}

/* Every rank restored the same iteration, never an older one than the launch before; the number of
 * failures. */
static int check_restored(int round, const int got[], const unsigned long long restored[],
    unsigned long long* previous, unsigned long long* finished_at)
{
    int failures = 0;
    for (int r = 0; r < RANKS; ++r) {
        if (got[r] != got[0] || restored[r] != restored[0]) {
            fprintf(stderr, "round %d: rank %d restored (%d, %llu), rank 0 (%d, %llu)\n", round, r, got[r],
                restored[r], got[0], restored[0]);
            failures++;
        }
    }
    if (round > 0 && (got[0] != 1 || restored[0] < *previous)) {
        fprintf(stderr, "round %d: restored %llu (got %d) after %llu: a committed checkpoint was lost\n", round,
            restored[0], got[0], *previous);
        failures++;
    }
    if (round == ROUNDS + 1 && restored[0] != *finished_at) {
        fprintf(stderr, "the last launch restored %llu, the finished one ended at %llu\n", restored[0],
            *finished_at);
        failures++;
    }
    if (round == ROUNDS)
        *finished_at = (got[0] == 1 ? restored[0] + 1 : 0) + 19;
    printf("round %d: all %d ranks restored %s%llu\n", round, RANKS, got[0] == 1 ? "iteration " : "nothing ",
        got[0] == 1 ? restored[0] : 0ull);
    if (got[0] == 1)
        *previous = restored[0];
    return failures;
}

/* The kill comes at a random moment after this launch committed its first checkpoint (newer than
 * `before`): a launch killed before any commit (a loaded machine) has nothing to lose. One random rank
 * first, the others a few milliseconds later. */
static void kill_launch(const pid_t pids[], long long before)
{
    for (double commit_limit = now() + 60; newest_committed() <= before && now() < commit_limit;)
        usleep(2000);
    usleep(50000 + (useconds_t)(rand() % 400000));
    int victim = rand() % RANKS;
    kill(pids[victim], SIGKILL);
    usleep((useconds_t)(rand() % 20000));
    for (int r = 0; r < RANKS; ++r)
        kill(pids[r], SIGKILL);
}

/* Waits for the ranks: those of the last rounds must exit 0, the others must have been killed; the
 * number of failures. */
static int reap_launch(int round, int last_round, const pid_t pids[])
{
    int failures = 0;
    for (int r = 0; r < RANKS; ++r) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (last_round && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            fprintf(stderr, "final round: rank %d ended with status %d\n", r, status);
            failures++;
        }
        if (!last_round && WIFEXITED(status)) {
            fprintf(stderr, "round %d: rank %d exited (%d) before it was killed\n", round, r, WEXITSTATUS(status));
            failures++;
        }
    }
    return failures;
}

static void remove_tree(const char* base)
{
    char command[600];
    snprintf(command, sizeof command, "%s", base);
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", command, (char*)NULL);
        _exit(127);
    }
    waitpid(pid, NULL, 0);
}

int main(void)
{
    const char* tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char base[400];
    snprintf(base, sizeof base, "%s/baton-multirank-XXXXXX", tmp);
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(chain, sizeof chain, "%s/chain", base);
    snprintf(results, sizeof results, "%s/results", base);
    mkdir(results, 0700);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    if (getenv("BATON_TEST_SEED"))
        seed = (unsigned)strtoul(getenv("BATON_TEST_SEED"), NULL, 10);
    srand(seed);
    printf("seed %u, chain %s\n", seed, chain);

    unsigned long long previous = 0;
    int failures = 0;
    /* ROUNDS launches are killed; the next one trains 20 iterations to the end; the last one only
     * restores, and must find exactly the final iteration. */
    unsigned long long finished_at = 0;
    for (int round = 0; round <= ROUNDS + 1 && failures == 0; ++round) {
        const int last_round = round >= ROUNDS;
        pid_t pids[RANKS];
        for (int r = 0; r < RANKS; ++r) {
            pids[r] = fork();
            if (pids[r] == 0)
                rank_main(round, r, round == ROUNDS ? 20 : round > ROUNDS ? 0 : UINT64_MAX / 2);
        }
        /* Every rank reports its restore before the kill timer starts. */
        int got[RANKS];
        unsigned long long restored[RANKS];
        const int unreported = wait_restored(round, got, restored);
        failures += unreported;
        if (!unreported)
            failures += check_restored(round, got, restored, &previous, &finished_at);
        if (!last_round)
            kill_launch(pids, got[0] == 1 ? (long long)restored[0] : -1);
        failures += reap_launch(round, last_round, pids);
    }
    if (failures == 0)
        remove_tree(base); /* leave nothing behind on success */
    printf(failures == 0 ? "ok\n" : "FAILED (seed %u)\n", seed);
    return failures == 0 ? 0 : 1;
}
