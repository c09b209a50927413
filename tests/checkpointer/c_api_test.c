/* The C ABI used from C: round trip, blobs, manifest fields, hooks, stats and error reporting. */
#define _XOPEN_SOURCE 700
#include "baton_ckpt.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                         \
            ++failures;                                                                                      \
        }                                                                                                    \
    } while (0)

static int removeEntry(const char* path, const struct stat* st, int flag, struct FTW* ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void fill(unsigned char* data, size_t size, unsigned seed)
{
    for (size_t i = 0; i < size; ++i)
        data[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
}

/* Writes checkpoints of `weights` and `small` through the hooks and requests; 0, or -1 if no
 * checkpointer could be made. */
static int writeCheckpoints(const char* dir, unsigned char* weights, size_t size, unsigned char* small,
    size_t smallSize)
{
    baton_ckpt* ckpt = baton_ckpt_create(dir, 2);
    CHECK(ckpt != NULL);
    if (ckpt == NULL) {
        fprintf(stderr, "create failed: %s\n", baton_ckpt_last_error(NULL));
        return -1;
    }
    CHECK(baton_ckpt_register_region(ckpt, "weights", weights, size) == 0);
    CHECK(baton_ckpt_register_region(ckpt, "small", small, smallSize) == 0);
    CHECK(baton_ckpt_register_region(ckpt, NULL, small, 1) == -1);
    CHECK(strstr(baton_ckpt_last_error(ckpt), "NULL") != NULL);
    CHECK(baton_ckpt_set_blob(ckpt, "step", "12", 2) == 0);
    CHECK(baton_ckpt_set_epoch(ckpt, 3) == 0);
    CHECK(baton_ckpt_set_manifest_field(ckpt, "tuning", "{\"interval\": 9}") == 0);
    CHECK(baton_ckpt_set_manifest_field(ckpt, "tuning", "{not json") == -1);
    CHECK(baton_ckpt_set_manifest_field(ckpt, "regions", "[]") == -1);

    /* The hooks and a non-blocking request, then a second request while it may still be in flight. */
    CHECK(baton_ckpt_before_update(ckpt) == 0);
    CHECK(baton_ckpt_after_update(ckpt, 12) == 0);
    CHECK(baton_ckpt_request(ckpt, 12) == 1);
    CHECK(baton_ckpt_before_update(ckpt) == 0);
    CHECK(baton_ckpt_wait(ckpt) == 0);
    CHECK(baton_ckpt_schedule(ckpt) == 0);
    CHECK(baton_ckpt_after_update(ckpt, 13) == 0); /* starts the scheduled one */
    CHECK(baton_ckpt_request(ckpt, 14) >= 0);
    CHECK(baton_ckpt_wait(ckpt) == 0);
    CHECK(baton_ckpt_checkpoint_now(ckpt, 20) == 0);

    baton_ckpt_stats stats;
    CHECK(baton_ckpt_get_stats(ckpt, &stats) == 0);
    CHECK(stats.iteration == 20);
    CHECK(stats.committed == 1 && stats.finished == 1);
    CHECK(stats.bytes >= size + smallSize + 2);
    CHECK(stats.committed_total + stats.dropped_requests >= 3);
    CHECK(stats.failed_total == 0);
    baton_ckpt_destroy(ckpt);
    return 0;
}

/* Restore into fresh buffers: the same bytes, blobs and manifest fields as written. */
static void checkRestore(const char* dir, const unsigned char* weights, size_t size, const unsigned char* small,
    size_t smallSize)
{
    baton_ckpt* reader = baton_ckpt_create(dir, 0);
    CHECK(reader != NULL);
    unsigned char* restored = calloc(1, size);
    unsigned char restoredSmall[17] = { 0 };
    CHECK(baton_ckpt_register_region(reader, "weights", restored, size) == 0);
    CHECK(baton_ckpt_register_region(reader, "small", restoredSmall, sizeof restoredSmall) == 0);
    CHECK(baton_ckpt_blob_size(reader, "step") == -1);
    uint64_t iteration = 0;
    CHECK(baton_ckpt_restore(reader, &iteration) == 1);
    CHECK(iteration == 20);
    CHECK(memcmp(restored, weights, size) == 0);
    CHECK(memcmp(restoredSmall, small, smallSize) == 0);
    char step[8] = { 0 };
    CHECK(baton_ckpt_blob_size(reader, "step") == 2);
    CHECK(baton_ckpt_get_blob(reader, "step", step, sizeof step) == 2);
    CHECK(strcmp(step, "12") == 0);
    CHECK(baton_ckpt_get_blob(reader, "absent", step, sizeof step) == -1);
    const char* manifest = baton_ckpt_restored_manifest(reader);
    CHECK(strstr(manifest, "\"interval\":9") != NULL);
    CHECK(strstr(manifest, "\"epoch\":3") != NULL);
    CHECK(strcmp(baton_ckpt_restore_fallbacks(reader), "") == 0);

    /* A region registered with another size than the checkpoint's is an error, not a silent restore. */
    CHECK(baton_ckpt_register_region(reader, "small", restoredSmall, 3) == 0);
    CHECK(baton_ckpt_restore(reader, &iteration) == -1);
    CHECK(strstr(baton_ckpt_last_error(reader), "small") != NULL);
    baton_ckpt_destroy(reader);
    baton_ckpt_destroy(NULL);
    free(restored);
}

/* Checkpoints are private (0600 files) unless the caller asks for other permissions. */
static void checkPermissions(const char* dir)
{
    char path[1024];
    struct stat st;
    mode_t saved = umask(022);
    snprintf(path, sizeof path, "%s/ckpt-000000000020/data.bin", dir);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    char shared[256];
    snprintf(shared, sizeof shared, "%s/shared", dir);
    baton_ckpt* group = baton_ckpt_create_with_mode(shared, 2, 0640);
    CHECK(group != NULL);
    if (group != NULL) {
        CHECK(baton_ckpt_checkpoint_now(group, 1) == 0);
        baton_ckpt_destroy(group);
    }
    CHECK(stat(shared, &st) == 0 && (st.st_mode & 0777) == 0750);
    snprintf(path, sizeof path, "%s/ckpt-000000000001/manifest.json", shared);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK(baton_ckpt_create_with_mode(shared, 2, 0444) == NULL);
    umask(saved);
}

int main(void)
{
    char dir[] = "/tmp/baton-c-api-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }

    /* Errors: a NULL handle from a bad directory, with a message. */
    CHECK(baton_ckpt_create("", 2) == NULL);
    CHECK(strlen(baton_ckpt_last_error(NULL)) > 0);
    CHECK(strlen(baton_ckpt_version()) > 0);

    size_t size = 3 * 1024 * 1024 + 5;
    unsigned char* weights = malloc(size);
    unsigned char small[17];
    fill(weights, size, 1);
    fill(small, sizeof small, 2);
    if (writeCheckpoints(dir, weights, size, small, sizeof small) != 0) {
        free(weights);
        return 1;
    }
    checkRestore(dir, weights, size, small, sizeof small);
    checkPermissions(dir);

    free(weights);
    nftw(dir, removeEntry, 16, FTW_DEPTH | FTW_PHYS);
    if (failures == 0)
        printf("c_api_test: all checks passed\n");
    return failures == 0 ? 0 : 1;
}
