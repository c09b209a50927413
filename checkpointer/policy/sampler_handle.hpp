// The C handle behind baton_sampler, shared with the other C interfaces that accept one.
#pragma once

#include "baton/ckpt/sampler.hpp"

struct baton_sampler {
    baton::ckpt::ResumableSampler sampler;
};
