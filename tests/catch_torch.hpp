#pragma once
// Tests that use LibTorch include this instead of <catch2/catch.hpp>.
// LibTorch (c10/util/logging_is_not_google_glog.h) defines a glog-style CHECK
// macro that aborts the process and records nothing; included after Catch it
// silently replaces Catch's CHECK. LibTorch goes first, its CHECK is removed,
// then Catch defines its own.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>
