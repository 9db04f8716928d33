// Small tables to Parquet through Apache Arrow (see table_file.hpp).
#include "text/data/table_file.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef TRLX_WITH_ARROW
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/pretty_print.h>
#include <arrow/util/compression.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#endif

namespace fs = std::filesystem;

namespace trlx::data {

#ifndef TRLX_WITH_ARROW

bool parquet_writer_built() { return false; }

std::string parquet_file_bytes(const std::vector<TableColumn>&) {
  throw Error("this trlx was built without Apache Arrow, so it cannot write Parquet files; rebuild it with "
              "scripts/setup.sh (it installs pyarrow, whose Arrow libraries trlx uses)");
}

std::string parquet_schema_text(const fs::path& file) {
  fail_input("{}: this trlx was built without Apache Arrow, so it cannot read Parquet files", file.string());
}

#else

bool parquet_writer_built() { return true; }

namespace {

void check(const arrow::Status& st, const std::string& what) {
  if (!st.ok()) throw Error(fmt::format("writing a Parquet table: {}: {}", what, st.ToString()));
}

template <class T>
T check(arrow::Result<T> r, const std::string& what) {
  check(r.status(), what);
  return std::move(r).ValueUnsafe();
}

// Every key the column's messages have, in order of first appearance.
std::vector<std::string> message_keys(const TableColumn& c) {
  std::vector<std::string> keys;
  for (const auto& v : c.values) {
    if (v.is_null()) continue;
    if (!v.is_array()) throw Error(fmt::format("column {}: a value is not a list of messages: {}", c.name, v.dump()));
    for (const auto& m : v) {
      if (!m.is_object())
        throw Error(fmt::format("column {}: a message is not an object: {}", c.name, m.dump()));
      for (const auto& [k, _] : m.items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  return keys;
}

std::string as_text(const Value& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::shared_ptr<arrow::Array> column_array(const TableColumn& c, std::shared_ptr<arrow::Field>* field) {
  const std::string what = "column " + c.name;
  auto* pool = arrow::default_memory_pool();
  switch (c.kind) {
    case TableColumn::Kind::Int64: {
      arrow::Int64Builder b(pool);
      for (const auto& v : c.values) {
        if (v.is_null()) check(b.AppendNull(), what);
        else if (v.is_number_integer()) check(b.Append(v.get<int64_t>()), what);
        else throw Error(fmt::format("{}: {} is not an integer", what, v.dump()));
      }
      *field = arrow::field(c.name, arrow::int64());
      return check(b.Finish(), what);
    }
    case TableColumn::Kind::Double: {
      arrow::DoubleBuilder b(pool);
      for (const auto& v : c.values) {
        if (v.is_null() || (v.is_number_float() && std::isnan(v.get<double>()))) check(b.AppendNull(), what);
        else if (v.is_number()) check(b.Append(v.get<double>()), what);
        else throw Error(fmt::format("{}: {} is not a number", what, v.dump()));
      }
      *field = arrow::field(c.name, arrow::float64());
      return check(b.Finish(), what);
    }
    case TableColumn::Kind::Text: {
      arrow::LargeStringBuilder b(pool);
      for (const auto& v : c.values) {
        if (v.is_null()) check(b.AppendNull(), what);
        else check(b.Append(as_text(v)), what);
      }
      *field = arrow::field(c.name, arrow::large_utf8());
      return check(b.Finish(), what);
    }
    case TableColumn::Kind::Messages: {
      const auto keys = message_keys(c);
      arrow::FieldVector fields;
      std::vector<std::shared_ptr<arrow::ArrayBuilder>> children;
      for (const auto& k : keys) {
        fields.push_back(arrow::field(k, arrow::utf8()));
        children.push_back(std::make_shared<arrow::StringBuilder>(pool));
      }
      auto struct_type = arrow::struct_(fields);
      auto sb = std::make_shared<arrow::StructBuilder>(struct_type, pool, children);
      arrow::ListBuilder b(pool, sb, arrow::list(arrow::field("element", struct_type)));
      for (const auto& v : c.values) {
        if (v.is_null()) {
          check(b.AppendNull(), what);
          continue;
        }
        check(b.Append(), what);
        for (const auto& m : v) {
          check(sb->Append(), what);
          for (size_t i = 0; i < keys.size(); ++i) {
            auto* s = static_cast<arrow::StringBuilder*>(sb->field_builder(static_cast<int>(i)));
            if (!m.contains(keys[i]) || m.at(keys[i]).is_null()) check(s->AppendNull(), what);
            else check(s->Append(as_text(m.at(keys[i]))), what);
          }
        }
      }
      *field = arrow::field(c.name, arrow::list(arrow::field("element", struct_type)));
      return check(b.Finish(), what);
    }
  }
  throw Error(what + ": unknown kind");
}

}  // namespace

std::string parquet_file_bytes(const std::vector<TableColumn>& columns) {
  arrow::FieldVector fields;
  arrow::ArrayVector arrays;
  const size_t rows = columns.empty() ? 0 : columns.front().values.size();
  for (const auto& c : columns) {
    if (c.values.size() != rows)
      throw Error(fmt::format("writing a Parquet table: column {} has {} values, column {} has {}", c.name,
                              c.values.size(), columns.front().name, rows));
    std::shared_ptr<arrow::Field> f;
    arrays.push_back(column_array(c, &f));
    fields.push_back(std::move(f));
  }
  auto table = arrow::Table::Make(arrow::schema(fields), arrays, static_cast<int64_t>(rows));
  auto sink = check(arrow::io::BufferOutputStream::Create(), "buffer");
  parquet::WriterProperties::Builder props;
  if (arrow::util::Codec::IsAvailable(arrow::Compression::SNAPPY)) props.compression(parquet::Compression::SNAPPY);
  auto arrow_props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
  check(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink,
                                   std::max<int64_t>(1, static_cast<int64_t>(rows)), props.build(), arrow_props),
        "write");
  auto buffer = check(sink->Finish(), "finish");
  return buffer->ToString();
}

std::string parquet_schema_text(const fs::path& path) {
  const std::string f = path.string();
  auto file = arrow::io::ReadableFile::Open(f);
  if (!file.ok()) fail_input("{}: cannot open: {}", f, file.status().ToString());
  auto reader = parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
  if (!reader.ok()) fail_input("{}: not a readable Parquet file: {}", f, reader.status().ToString());
  std::shared_ptr<arrow::Schema> schema;
  if (auto st = (*reader)->GetSchema(&schema); !st.ok())
    fail_input("{}: the Parquet schema cannot be read as Arrow columns: {}", f, st.ToString());
  // pyarrow's Schema.to_string: nested types get a line per child field.
  arrow::PrettyPrintOptions options;
  options.show_schema_metadata = false;
  std::string text;
  if (auto st = arrow::PrettyPrint(*schema, options, &text); !st.ok())
    fail_input("{}: cannot print the schema: {}", f, st.ToString());
  return text;
}

#endif

}  // namespace trlx::data
