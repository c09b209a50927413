"""The sampler and session C interfaces used from Python through ctypes, as a training script would.

Usage: ctypes_test.py <path of libbaton-ckpt.so>"""
import ctypes
import json
import sys
import tempfile
import time

lib = ctypes.CDLL(sys.argv[1])
u64 = ctypes.c_uint64
lib.baton_sampler_create.restype = ctypes.c_void_p
lib.baton_sampler_create.argtypes = [u64, u64, u64, u64, ctypes.c_int]
lib.baton_sampler_from_json.restype = ctypes.c_void_p
lib.baton_sampler_from_json.argtypes = [ctypes.c_char_p]
lib.baton_sampler_next.argtypes = [ctypes.c_void_p, ctypes.POINTER(u64)]
lib.baton_sampler_state_json.restype = ctypes.c_size_t
lib.baton_sampler_state_json.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.baton_sampler_destroy.argtypes = [ctypes.c_void_p]
lib.baton_session_create.restype = ctypes.c_void_p
lib.baton_session_create.argtypes = [ctypes.c_char_p, ctypes.c_double, ctypes.c_int]
lib.baton_session_register_region.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
lib.baton_session_attach_sampler.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.baton_session_restore.argtypes = [ctypes.c_void_p, ctypes.POINTER(u64)]
lib.baton_session_before_update.argtypes = [ctypes.c_void_p]
lib.baton_session_step.argtypes = [ctypes.c_void_p, u64]
lib.baton_session_request_checkpoint.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.baton_session_finish.argtypes = [ctypes.c_void_p]
lib.baton_session_should_exit.argtypes = [ctypes.c_void_p]
lib.baton_session_interval.restype = u64
lib.baton_session_interval.argtypes = [ctypes.c_void_p]
lib.baton_session_destroy.argtypes = [ctypes.c_void_p]
lib.baton_session_last_error.restype = ctypes.c_char_p


def draw(sampler, count):
    out, index = [], u64()
    for _ in range(count):
        assert lib.baton_sampler_next(sampler, ctypes.byref(index)) == 0
        out.append(index.value)
    return out


def state_json(sampler):
    size = lib.baton_sampler_state_json(sampler, None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    lib.baton_sampler_state_json(sampler, buffer, size + 1)
    return buffer.value


# One epoch of one rank is a permutation; a sampler restored from its JSON state continues exactly.
sampler = lib.baton_sampler_create(1000, 42, 1, 0, 0)
assert sorted(draw(sampler, 1000)) == list(range(1000))
draw(sampler, 123)
saved = state_json(sampler)
assert json.loads(saved)["position"] == 123
copy = lib.baton_sampler_from_json(saved)
assert draw(copy, 2000) == draw(sampler, 2000)
lib.baton_sampler_destroy(copy)
lib.baton_sampler_destroy(sampler)

with tempfile.TemporaryDirectory() as chain:
    weights = (ctypes.c_float * 4096)()
    sampler = lib.baton_sampler_create(500, 1, 1, 0, 0)
    session = lib.baton_session_create(chain.encode(), 50.0, 0)
    assert session, lib.baton_session_last_error()
    assert lib.baton_session_register_region(session, b"weights", ctypes.addressof(weights), ctypes.sizeof(weights)) == 0
    assert lib.baton_session_attach_sampler(session, sampler) == 0
    assert lib.baton_session_restore(session, ctypes.byref(u64())) == 0
    for iteration in range(40):
        draw(sampler, 8)
        time.sleep(0.002)
        lib.baton_session_before_update(session)
        weights[0] = iteration
        assert lib.baton_session_step(session, iteration) >= 0, lib.baton_session_last_error()
    assert lib.baton_session_interval(session) >= 1
    assert lib.baton_session_finish(session) == 0
    lib.baton_session_request_checkpoint(session, 1)
    draw(sampler, 8)
    lib.baton_session_before_update(session)
    assert lib.baton_session_step(session, 40) == 1
    assert lib.baton_session_should_exit(session) == 1
    lib.baton_session_destroy(session)

    # The next job resumes weights and data order from the final checkpoint.
    resumed = lib.baton_sampler_create(500, 1, 1, 0, 0)
    session = lib.baton_session_create(chain.encode(), 50.0, 0)
    weights2 = (ctypes.c_float * 4096)()
    lib.baton_session_register_region(session, b"weights", ctypes.addressof(weights2), ctypes.sizeof(weights2))
    lib.baton_session_attach_sampler(session, resumed)
    restored = u64()
    assert lib.baton_session_restore(session, ctypes.byref(restored)) == 1, lib.baton_session_last_error()
    assert restored.value == 40 and weights2[0] == 39.0
    assert json.loads(state_json(resumed)) == json.loads(state_json(sampler))
    lib.baton_session_destroy(session)
    lib.baton_sampler_destroy(resumed)
    lib.baton_sampler_destroy(sampler)
print("ctypes: sampler and session OK")
