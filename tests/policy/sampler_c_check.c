/* The sampler's C header compiled as C: create, draw, save, restore, compare. */
#include "baton_sampler.h"

#include <stdlib.h>
#include <string.h>

int samplerFromC(void);

int samplerFromC(void)
{
    baton_sampler* sampler = baton_sampler_create(100, 1, 2, 0, 1);
    if (sampler == NULL)
        return 1;
    uint64_t first[10];
    if (baton_sampler_next_many(sampler, first, 10) != 0)
        return 2;
    char state[512];
    if (baton_sampler_state_json(sampler, state, sizeof state) >= sizeof state)
        return 3;
    baton_sampler* copy = baton_sampler_from_json(state);
    if (copy == NULL)
        return 4;
    int result = 0;
    for (int i = 0; i < 100 && result == 0; ++i) {
        uint64_t a = 0, b = 0;
        if (baton_sampler_next(sampler, &a) != 0 || baton_sampler_next(copy, &b) != 0 || a != b)
            result = 5;
    }
    baton_sampler_destroy(copy);
    baton_sampler_destroy(sampler);
    return result;
}
