// The object behind a baton_ckpt handle, shared with the other C interfaces that take one (session).
#pragma once

#include <memory>
#include <string>

#include "baton/ckpt/checkpointer.hpp"
#include "c_api_error.hpp"

struct baton_ckpt {
    std::unique_ptr<baton::ckpt::Checkpointer> checkpointer;
    baton::ckpt::capi::LastError error;
    baton::ckpt::RestoreResult restored;
    std::string manifestText = "null";
    std::string fallbackText;
};
