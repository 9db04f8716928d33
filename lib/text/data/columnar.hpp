#pragma once
// Parquet and Arrow files (and compressed JSON Lines) through Apache Arrow's
// C++ libraries; used by the dataset reader, not part of the API.
//
// Rows come out as the JSON reader would give them for the same data written
// by `datasets.Dataset.to_json` (or json.dumps of `Table.to_pylist()`):
// columns in schema order; strings (string, large_string, string_view,
// dictionary-encoded), integers, floats, booleans and nulls as JSON values;
// lists (list, large_list, fixed_size_list, list views) as arrays; structs as
// objects with every field of the struct type, in its order (a field a row
// does not have is null, as datasets gives None). Other types (binary, map,
// dates, timestamps, decimals, unions, extension types) are refused with
// their column.
//
// Memory: a Parquet file is read one row group and one column at a time; an
// Arrow file one record batch at a time. What the reader holds besides the
// rows it has produced is one column chunk of one row group (or one record
// batch).
//
// A row's location: Row::line is 0 and Row::element the row's 0-based index
// in its file (as `datasets` numbers rows), so Row::where() reads
// "file (row N)".
#include <filesystem>
#include <functional>
#include <string>

#include "text/data/dataset.hpp"

namespace trlx::data::detail {

// Whether this build reads Parquet and Arrow files (it was built with pyarrow).
bool columnar_built();

// Receives each row, in file order.
using RowSink = std::function<void(Row&&)>;

// Every row of a Parquet file, one row group at a time. InputError names the
// file, row group and column.
void read_parquet(const std::filesystem::path& file, const RowSink& sink);

// Every row of an Arrow IPC file: the stream format `datasets.save_to_disk`
// writes, or the random-access file format (Feather v2). InputError names the
// file, record batch and column.
void read_arrow_ipc(const std::filesystem::path& file, const RowSink& sink);

// The whole text of a gzip (.gz) or Zstandard (.zst) file.
std::string read_compressed(const std::filesystem::path& file);

}  // namespace trlx::data::detail
