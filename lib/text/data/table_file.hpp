#pragma once
// Small tables written as Parquet files (the online trainers' completion
// logs), through the same Apache Arrow libraries the dataset reader uses.
// What the file holds is what pandas' DataFrame.to_parquet writes for the
// same Python values: one column per entry, in order, in one row group.
#include <filesystem>
#include <string>
#include <vector>

#include "text/data/dataset.hpp"

namespace trlx::data {

struct TableColumn {
  enum class Kind {
    Int64,     // int64
    Double,    // double; null or NaN: a null
    Text,      // large_string (pandas' string dtype); null: a null
    Messages,  // list<struct<...: string>>: each value an array of message
               // objects; the struct's fields are every key the column's
               // messages have, in order of first appearance, each a string
               // (another JSON value is written as its JSON text)
  };
  std::string name;
  Kind kind;
  std::vector<Value> values;  // one per row
};

// Whether this build writes Parquet files (it was built with Arrow).
bool parquet_writer_built();

// The Parquet file of `columns` (all of the same length), as bytes: Snappy-
// compressed where the library has it, the Arrow schema stored with it (so
// readers get large_string back). Throws Error if the columns disagree in
// length or a value does not fit its kind.
std::string parquet_file_bytes(const std::vector<TableColumn>& columns);

// The Arrow schema of a Parquet file as text ("step: int64\nprompt: ..."),
// metadata left out: what pyarrow's Schema.to_string(show_schema_metadata=False)
// prints. InputError names the file when it cannot be read.
std::string parquet_schema_text(const std::filesystem::path& file);

}  // namespace trlx::data
