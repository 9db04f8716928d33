#pragma once
// The engine's insides that tests inspect and drive directly (see
// engine/engine_probe.hpp), with what tests use of what the probe hands
// them: the strategy and the policy module.
#include "dist/strategy/strategy.hpp"
#include "engine/engine.hpp"
#include "engine/engine_probe.hpp"
#include "model/decoder.hpp"
