// The object behind a baton_ckpt handle, shared with the other C interfaces that take one (session).
#pragma once

#include <memory>
#include <string>

#include "baton/ckpt/checkpointer.hpp"

struct baton_ckpt {
    std::unique_ptr<baton::ckpt::Checkpointer> checkpointer;
    std::string error;
    baton::ckpt::RestoreResult restored;
    std::string manifestText = "null";
    std::string fallbackText;
};
