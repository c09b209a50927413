/* A C program built against an installed baton with nothing but `pkg-config baton-ckpt`: it writes a
 * checkpoint of a buffer to the chain directory it is given and restores it into a second buffer. */
#include <baton_ckpt.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char** argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CHAIN_DIR\n", argv[0]);
        return 2;
    }
    unsigned char weights[4096], restored[4096];
    for (size_t i = 0; i < sizeof weights; ++i)
        weights[i] = (unsigned char)(i * 31u + 7u);
    baton_ckpt* ckpt = baton_ckpt_create(argv[1], 2);
    if (ckpt == NULL || baton_ckpt_register_region(ckpt, "weights", weights, sizeof weights) != 0
        || baton_ckpt_checkpoint_now(ckpt, 5) != 0 || baton_ckpt_wait(ckpt) != 0) {
        fprintf(stderr, "checkpoint failed: %s\n", baton_ckpt_last_error(ckpt));
        return 1;
    }
    baton_ckpt_destroy(ckpt);

    memset(restored, 0, sizeof restored);
    ckpt = baton_ckpt_create(argv[1], 2);
    uint64_t iteration = 0;
    if (ckpt == NULL || baton_ckpt_register_region(ckpt, "weights", restored, sizeof restored) != 0
        || baton_ckpt_restore(ckpt, &iteration) != 1) {
        fprintf(stderr, "restore failed: %s\n", baton_ckpt_last_error(ckpt));
        return 1;
    }
    baton_ckpt_destroy(ckpt);
    if (iteration != 5 || memcmp(weights, restored, sizeof weights) != 0) {
        fprintf(stderr, "restored iteration %llu, bytes %s\n", (unsigned long long)iteration,
            memcmp(weights, restored, sizeof weights) == 0 ? "equal" : "DIFFERENT");
        return 1;
    }
    printf("C: baton %s, restored iteration %llu, bytes equal\n", baton_ckpt_version(), (unsigned long long)iteration);
    return 0;
}
