#pragma once
// Tests that use LibTorch include this instead of <catch2/catch.hpp>.
// LibTorch (c10/util/logging_is_not_google_glog.h) defines a glog-style CHECK
// macro that aborts the process and records nothing; included after Catch it
// silently replaces Catch's CHECK. LibTorch goes first, its CHECK is removed,
// then Catch defines its own.
// (In a unity batch Catch may already be in, after LibTorch: its CHECK then
// stands and is kept.)
#include <torch/torch.h>
#ifndef TWOBLUECUBES_SINGLE_INCLUDE_CATCH_HPP_INCLUDED
#undef CHECK
#endif
#include <catch2/catch.hpp>
