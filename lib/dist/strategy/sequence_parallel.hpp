#pragma once
// Sequence and context parallelism over one sequence group of the mesh
// (model::SequenceParallel): DeepSpeed-Ulysses' all-to-all exchanges around
// attention, context parallelism's gather of keys and values, and the
// gather of the final hidden states, each with its backward.
#include <memory>

#include "dist/comm/communicator.hpp"

namespace trlx::model {
class SequenceParallel;
}

namespace trlx::dist {

// Ulysses (sp_size) over `group`.
std::shared_ptr<model::SequenceParallel> make_sequence_parallel(std::shared_ptr<Communicator> group);
// Context parallelism (cp_size, keys and values all-gathered) over `group`.
std::shared_ptr<model::SequenceParallel> make_context_parallel(std::shared_ptr<Communicator> group);

}  // namespace trlx::dist
