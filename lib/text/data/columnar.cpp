// Parquet and Arrow IPC files to rows, and compressed text, through Apache
// Arrow's C++ libraries (see columnar.hpp).
#include "text/data/columnar.hpp"

#include "core/error.hpp"
#include "core/strings.hpp"
#include "text/data/internal.hpp"

#ifdef TRLX_WITH_ARROW
#include <cmath>

#include <arrow/api.h>
#include <arrow/io/compressed.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/compression.h>
#include <arrow/util/float16.h>
#include <parquet/arrow/reader.h>
#endif

namespace fs = std::filesystem;

namespace trlx::data::detail {

#ifndef TRLX_WITH_ARROW

bool columnar_built() { return false; }

namespace {
[[noreturn]] void not_built(const fs::path& file, const char* what) {
  fail_input(
      "{}: this trlx was built without Apache Arrow, so it cannot read {} files; rebuild it with "
      "scripts/setup.sh (it installs pyarrow, whose Arrow libraries trlx uses) or convert the file "
      "to JSON "
      "Lines",
      file.string(), what);
}
}  // namespace

void read_parquet(const fs::path& file, const RowSink&) { not_built(file, "Parquet"); }
void read_arrow_ipc(const fs::path& file, const RowSink&) { not_built(file, "Arrow"); }
std::string read_compressed(const fs::path& file) { not_built(file, "compressed"); }

#else

bool columnar_built() { return true; }

namespace {

// Why a type has no JSON value here, with the path of the offending part
// inside the column ("" when the type maps). `depth` counts nesting.
std::string unmappable(const arrow::DataType& type, const std::string& path, size_t depth) {
  if (depth > kMaxDepth) return fmt::format("{} is nested deeper than {} levels", path, kMaxDepth);
  switch (type.id()) {
    case arrow::Type::NA:
    case arrow::Type::BOOL:
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
    case arrow::Type::UINT8:
    case arrow::Type::UINT16:
    case arrow::Type::UINT32:
    case arrow::Type::UINT64:
    case arrow::Type::HALF_FLOAT:
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
    case arrow::Type::DATE32:
    case arrow::Type::DATE64:
      return "";
    case arrow::Type::TIMESTAMP: {
      const std::string& tz = static_cast<const arrow::TimestampType&>(type).timezone();
      if (tz.empty() || tz == "UTC" || tz == "utc" || tz == "Z" || tz == "+00:00" || tz == "Etc/UTC") return "";
      return fmt::format(
          "{} has type {}: trlx reads timestamps without a time zone or in UTC; cast the column to UTC "
          "(or to text) before saving the dataset",
          path, type.ToString());
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST:
    case arrow::Type::LIST_VIEW:
    case arrow::Type::LARGE_LIST_VIEW:
      return unmappable(*type.field(0)->type(), path + "[]", depth + 1);
    case arrow::Type::STRUCT:
      for (const auto& f : type.fields())
        if (auto why = unmappable(*f->type(), path + "." + f->name(), depth + 1); !why.empty())
          return why;
      return "";
    case arrow::Type::DICTIONARY:
      return unmappable(*static_cast<const arrow::DictionaryType&>(type).value_type(), path, depth);
    default:
      return fmt::format(
          "{} has type {}, which trlx cannot map to a JSON value (it reads strings, integers, "
          "floats, booleans, nulls, dates, timestamps, lists and structs); drop or convert the column before saving "
          "the dataset (datasets' remove_columns / cast_column)",
          path, type.ToString());
  }
}

// Where a value is, for errors: "file: row group 2, column "messages"".
struct Place {
  const std::string& file;
  const char* unit;  // "row group" or "record batch"
  int64_t index;
  const std::string& column;
  std::string str() const {
    return fmt::format("{}: {} {}, column \"{}\"", file, unit, index, column);
  }
};

Value string_value(std::string_view s, const Place& at, int64_t row) {
  if (auto bad = first_invalid_utf8(s))
    fail_input(
        "{}, row {}: not valid UTF-8 (byte 0x{:02X} at offset {} of the string); trlx reads UTF-8 "
        "text only",
        at.str(), row, static_cast<unsigned char>(s[*bad]), *bad);
  return Value(std::string(s));
}

// Dates and times as the ISO 8601 text Python's isoformat() gives for the
// date / datetime values datasets returns: "2024-02-29", "2024-02-29T13:05:00",
// a fraction only when there is one (6 digits, 9 for nanoseconds that are not
// whole microseconds), "+00:00" for UTC.
std::string iso_date(int64_t days) {
  // Days since 1970-01-01 to the proleptic Gregorian calendar (eras of 400 years).
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2);
  return fmt::format("{:04}-{:02}-{:02}", y, m, d);
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

std::string iso_timestamp(int64_t value, arrow::TimeUnit::type unit, bool utc) {
  const int64_t per_s = unit == arrow::TimeUnit::SECOND ? 1
                        : unit == arrow::TimeUnit::MILLI ? 1000
                        : unit == arrow::TimeUnit::MICRO ? 1000000
                                                         : 1000000000;
  const int64_t secs = floor_div(value, per_s);
  const int64_t frac = value - secs * per_s;  // 0 <= frac < per_s
  const int64_t day = floor_div(secs, 86400), sod = secs - day * 86400;
  std::string out = fmt::format("{}T{:02}:{:02}:{:02}", iso_date(day), sod / 3600, sod % 3600 / 60, sod % 60);
  const int64_t nanos = frac * (1000000000 / per_s);
  if (nanos % 1000 != 0) out += fmt::format(".{:09}", nanos);
  else if (nanos != 0) out += fmt::format(".{:06}", nanos / 1000);
  return utc ? out + "+00:00" : out;
}

// A float cell: JSON has no NaN or infinity; they become null, as
// Dataset.to_json writes them.
Value float_value(double v) { return std::isfinite(v) ? Value(v) : Value(nullptr); }

// The JSON value of element i of `a` (whose type unmappable() accepted).
// `row`: the row's index in the file, for errors.
Value cell(const arrow::Array& a, int64_t i, const Place& at, int64_t row) {
  if (a.IsNull(i)) return Value(nullptr);
  switch (a.type_id()) {
    case arrow::Type::NA:
      return Value(nullptr);
    case arrow::Type::BOOL:
      return Value(static_cast<const arrow::BooleanArray&>(a).Value(i));
    case arrow::Type::INT8:
      return Value(static_cast<int64_t>(static_cast<const arrow::Int8Array&>(a).Value(i)));
    case arrow::Type::INT16:
      return Value(static_cast<int64_t>(static_cast<const arrow::Int16Array&>(a).Value(i)));
    case arrow::Type::INT32:
      return Value(static_cast<int64_t>(static_cast<const arrow::Int32Array&>(a).Value(i)));
    case arrow::Type::INT64:
      return Value(static_cast<const arrow::Int64Array&>(a).Value(i));
    case arrow::Type::UINT8:
      return Value(static_cast<uint64_t>(static_cast<const arrow::UInt8Array&>(a).Value(i)));
    case arrow::Type::UINT16:
      return Value(static_cast<uint64_t>(static_cast<const arrow::UInt16Array&>(a).Value(i)));
    case arrow::Type::UINT32:
      return Value(static_cast<uint64_t>(static_cast<const arrow::UInt32Array&>(a).Value(i)));
    case arrow::Type::UINT64:
      return Value(static_cast<const arrow::UInt64Array&>(a).Value(i));
    case arrow::Type::HALF_FLOAT:
      return float_value(
          arrow::util::Float16::FromBits(static_cast<const arrow::HalfFloatArray&>(a).Value(i))
              .ToDouble());
    case arrow::Type::FLOAT:
      return float_value(static_cast<double>(static_cast<const arrow::FloatArray&>(a).Value(i)));
    case arrow::Type::DOUBLE:
      return float_value(static_cast<const arrow::DoubleArray&>(a).Value(i));
    case arrow::Type::DATE32:
      return Value(iso_date(static_cast<const arrow::Date32Array&>(a).Value(i)));
    case arrow::Type::DATE64:
      return Value(iso_date(floor_div(static_cast<const arrow::Date64Array&>(a).Value(i), 86400000)));
    case arrow::Type::TIMESTAMP: {
      const auto& t = static_cast<const arrow::TimestampType&>(*a.type());
      return Value(iso_timestamp(static_cast<const arrow::TimestampArray&>(a).Value(i), t.unit(),
                                 !t.timezone().empty()));
    }
    case arrow::Type::STRING:
      return string_value(static_cast<const arrow::StringArray&>(a).GetView(i), at, row);
    case arrow::Type::LARGE_STRING:
      return string_value(static_cast<const arrow::LargeStringArray&>(a).GetView(i), at, row);
    case arrow::Type::STRING_VIEW:
      return string_value(static_cast<const arrow::StringViewArray&>(a).GetView(i), at, row);
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST:
    case arrow::Type::LIST_VIEW:
    case arrow::Type::LARGE_LIST_VIEW: {
      int64_t start = 0, length = 0;
      const arrow::Array* values = nullptr;
      if (a.type_id() == arrow::Type::LIST) {
        const auto& l = static_cast<const arrow::ListArray&>(a);
        start = l.value_offset(i), length = l.value_length(i), values = l.values().get();
      } else if (a.type_id() == arrow::Type::LARGE_LIST) {
        const auto& l = static_cast<const arrow::LargeListArray&>(a);
        start = l.value_offset(i), length = l.value_length(i), values = l.values().get();
      } else if (a.type_id() == arrow::Type::FIXED_SIZE_LIST) {
        const auto& l = static_cast<const arrow::FixedSizeListArray&>(a);
        start = l.value_offset(i), length = l.value_length(i), values = l.values().get();
      } else if (a.type_id() == arrow::Type::LIST_VIEW) {
        const auto& l = static_cast<const arrow::ListViewArray&>(a);
        start = l.value_offset(i), length = l.value_length(i), values = l.values().get();
      } else {
        const auto& l = static_cast<const arrow::LargeListViewArray&>(a);
        start = l.value_offset(i), length = l.value_length(i), values = l.values().get();
      }
      Value out = Value::array();
      for (int64_t k = 0; k < length; ++k) out.push_back(cell(*values, start + k, at, row));
      return out;
    }
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      Value out = Value::object();
      const auto& fields = s.struct_type()->fields();
      for (int k = 0; k < static_cast<int>(fields.size()); ++k)
        out[fields[k]->name()] = cell(*s.field(k), i, at, row);
      return out;
    }
    case arrow::Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      return cell(*d.dictionary(), d.GetValueIndex(i), at, row);
    }
    default:
      break;
  }
  fail_input("{}, row {}: type {} has no JSON value", at.str(), row, a.type()->ToString());
}

// Arrow's message, with its "Invalid: " / "IOError: " code kept, on one line.
std::string reason(const arrow::Status& st) {
  std::string s = st.ToString();
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

// Whether a column's name and the field names inside its type are UTF-8:
// they become the keys of the rows' JSON objects.
bool names_utf8(const std::string& name, const arrow::DataType& type) {
  if (first_invalid_utf8(name)) return false;
  if (type.id() == arrow::Type::DICTIONARY)
    return names_utf8("", *static_cast<const arrow::DictionaryType&>(type).value_type());
  for (const auto& f : type.fields())
    if (!names_utf8(f->name(), *f->type())) return false;
  return true;
}

// Fills column `column` of rows[0..n) (objects already holding the columns
// before it) from the chunks of one row group / record batch.
void fill_column(std::vector<Value>& rows, const arrow::ChunkedArray& data, const std::string& name,
                 const Place& at, int64_t first_row) {
  if (auto why = unmappable(*data.type(), name, 1); !why.empty())
    fail_input("{}: {}", at.str(), why);
  if (!names_utf8(name, *data.type()))
    fail_input("{}: the name of the column or of a field in it is not valid UTF-8; trlx reads UTF-8 text only",
               at.str());
  if (data.length() != static_cast<int64_t>(rows.size()))
    fail_input("{}: holds {} values but the {} has {} rows; the file is damaged", at.str(),
               data.length(), at.unit, rows.size());
  size_t r = 0;
  for (const auto& chunk : data.chunks())
    for (int64_t k = 0; k < chunk->length(); ++k, ++r)
      rows[r][name] = cell(*chunk, k, at, first_row + static_cast<int64_t>(r));
}

void emit(std::vector<Value>& rows, const std::string& file, int64_t first_row,
          const RowSink& sink) {
  for (size_t r = 0; r < rows.size(); ++r)
    sink(Row{std::move(rows[r]), file, 0, static_cast<size_t>(first_row) + r});
  rows.clear();
}

std::shared_ptr<arrow::io::ReadableFile> open_file(const fs::path& path) {
  auto file = arrow::io::ReadableFile::Open(path.string());
  if (!file.ok()) fail_input("{}: cannot open data file: {}", path.string(), reason(file.status()));
  return *file;
}

}  // namespace

void read_parquet(const fs::path& path, const RowSink& sink) {
  const std::string f = path.string();
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<arrow::Schema> schema;
  try {
    auto opened = parquet::arrow::OpenFile(open_file(path), arrow::default_memory_pool());
    if (!opened.ok()) fail_input("{}: not a readable Parquet file: {}", f, reason(opened.status()));
    reader = std::move(*opened);
    if (auto st = reader->GetSchema(&schema); !st.ok())
      fail_input("{}: the Parquet schema cannot be read as Arrow columns: {}", f, reason(st));
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {  // the Parquet library throws on some damage
    fail_input("{}: not a readable Parquet file: {}", f, e.what());
  }

  int64_t first_row = 0;
  std::vector<Value> rows;
  const int groups = reader->num_row_groups();
  for (int g = 0; g < groups; ++g) {
    const int64_t n = reader->parquet_reader()->metadata()->RowGroup(g)->num_rows();
    if (n < 0) fail_input("{}: row group {} has {} rows; the file is damaged", f, g, n);
    rows.clear();
    // One column at a time: what the reader holds is one column chunk.
    for (int c = 0; c < schema->num_fields(); ++c) {
      const std::string& name = schema->field(c)->name();
      const Place at{f, "row group", g, name};
      std::shared_ptr<arrow::ChunkedArray> data;
      arrow::Status st;
      try {
        st = reader->RowGroup(g)->Column(c)->Read(&data);
      } catch (const std::exception& e) {
        fail_input("{}: cannot be read: {}", at.str(), e.what());
      }
      if (!st.ok()) fail_input("{}: cannot be read: {}", at.str(), reason(st));
      // The rows are made once a column is read: their count is then one the
      // file's data backs, not only its metadata.
      if (c == 0) {
        if (data->length() != n)
          fail_input("{}: holds {} values but the row group has {} rows; the file is damaged", at.str(),
                     data->length(), n);
        rows.assign(static_cast<size_t>(n), Value::object());
      }
      fill_column(rows, *data, name, at, first_row);
    }
    emit(rows, f, first_row, sink);
    first_row += n;
  }
}

void read_arrow_ipc(const fs::path& path, const RowSink& sink) {
  const std::string f = path.string();
  auto file = open_file(path);
  // The random-access format starts with "ARROW1"; the stream format (what
  // save_to_disk writes) with a message.
  bool random_access = false;
  {
    auto head = file->ReadAt(0, 6);
    if (head.ok() && (*head)->size() == 6 && (*head)->ToString() == "ARROW1") random_access = true;
    if (auto st = file->Seek(0); !st.ok())
      fail_input("{}: cannot read data file: {}", f, reason(st));
  }
  int64_t first_row = 0;
  std::vector<Value> rows;
  auto convert = [&](const arrow::RecordBatch& batch, int64_t index) {
    // ValidateFull held every column to the batch's row count, but a column of
    // type null has no data: a count that no column's data backs is damage.
    const int64_t bytes = arrow::util::TotalBufferSize(batch);
    if (batch.num_rows() > 8 * bytes + 1024)
      fail_input("{}: record batch {} has {} rows but {} bytes of data; the file is damaged", f, index,
                 batch.num_rows(), bytes);
    rows.assign(static_cast<size_t>(batch.num_rows()), Value::object());
    for (int c = 0; c < batch.num_columns(); ++c) {
      const std::string& name = batch.schema()->field(c)->name();
      const Place at{f, "record batch", index, name};
      fill_column(rows, arrow::ChunkedArray(batch.column(c)), name, at, first_row);
    }
    emit(rows, f, first_row, sink);
    first_row += batch.num_rows();
  };
  if (random_access) {
    auto reader = arrow::ipc::RecordBatchFileReader::Open(file);
    if (!reader.ok()) fail_input("{}: not a readable Arrow file: {}", f, reason(reader.status()));
    for (int b = 0; b < (*reader)->num_record_batches(); ++b) {
      auto batch = (*reader)->ReadRecordBatch(b);
      if (!batch.ok())
        fail_input("{}: record batch {} cannot be read: {}", f, b, reason(batch.status()));
      // Full validation: offsets and dictionary indices must lie inside their buffers.
      if (auto st = (*batch)->ValidateFull(); !st.ok())
        fail_input("{}: record batch {} is damaged: {}", f, b, reason(st));
      convert(**batch, b);
    }
    return;
  }
  auto reader = arrow::ipc::RecordBatchStreamReader::Open(file);
  if (!reader.ok())
    fail_input("{}: not a readable Arrow stream (the format datasets' save_to_disk writes): {}", f,
               reason(reader.status()));
  for (int64_t b = 0;; ++b) {
    std::shared_ptr<arrow::RecordBatch> batch;
    if (auto st = (*reader)->ReadNext(&batch); !st.ok())
      fail_input("{}: record batch {} cannot be read: {}", f, b, reason(st));
    if (!batch) break;
    if (auto st = batch->ValidateFull(); !st.ok())
      fail_input("{}: record batch {} is damaged: {}", f, b, reason(st));
    convert(*batch, b);
  }
}

std::string read_compressed(const fs::path& path) {
  const std::string f = path.string();
  const std::string name = to_lower(path.filename().string());
  const bool gz = ends_with(name, ".gz");
  const char* format = gz ? "gzip" : "Zstandard";
  auto codec = arrow::util::Codec::Create(gz ? arrow::Compression::GZIP : arrow::Compression::ZSTD);
  if (!codec.ok())
    fail_input("{}: this build cannot decompress {}: {}", f, format, reason(codec.status()));
  auto stream = arrow::io::CompressedInputStream::Make(codec->get(), open_file(path));
  if (!stream.ok()) fail_input("{}: cannot read {} data: {}", f, format, reason(stream.status()));
  std::string text;
  for (;;) {
    auto chunk = (*stream)->Read(1 << 20);
    if (!chunk.ok()) fail_input("{}: not valid {} data: {}", f, format, reason(chunk.status()));
    if ((*chunk)->size() == 0) break;
    text.append(reinterpret_cast<const char*>((*chunk)->data()),
                static_cast<size_t>((*chunk)->size()));
  }
  return text;
}

#endif

}  // namespace trlx::data::detail
