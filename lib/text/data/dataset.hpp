#pragma once
// Training data on disk -> rows in the shape each trainer expects.
//
// Reading (load_dataset):
//   * `x.jsonl`  JSON Lines: one object per line; blank lines are skipped.
//   * `x.json`   a top-level array of row objects; or an object holding such an
//                array under the split name ("train", "test", ...) or "data";
//                any other object is one row. A .json file that is not a single
//                JSON value is read as JSON Lines (many hub files are).
//   * a directory: every .jsonl/.json file below it (hidden entries and
//                dataset metadata files such as dataset_info.json skipped) is
//                sorted by its path. File paths name their split the way the
//                Hugging Face hub does: a path word (split at - _ . / space and
//                digits) "train"/"training" is the train split, "test"/
//                "testing"/"eval"/"evaluation" the test split, "validation"/
//                "valid"/"val"/"dev" the validation split, any other word only
//                a split of that exact name. So `train.jsonl`,
//                `train-00000-of-00002.jsonl`, `data/train*.jsonl` and
//                `train/part0.jsonl` are all "train". If no file names any
//                known split, every file is "train".
//   * A file path is read whole: the split only picks the list inside a JSON
//     object file.
//   * Parquet (.parquet), Arrow (.arrow; save_to_disk directories, whose
//     state.json lists the data files; DatasetDict directories with
//     dataset_dict.json) and .jsonl/.json compressed with gzip or Zstandard,
//     through Apache Arrow (text/data/columnar.hpp; every rule is in the
//     README's "Datasets" section). One split never mixes JSON, Parquet and
//     Arrow files. .csv and other compressed files are refused with advice.
// Files must be UTF-8 (a leading byte-order mark is allowed). Errors name the
// file and 1-based line (and, in JSON arrays, the element index); for Parquet
// and Arrow the file, row group (record batch) and column.
//
// Shaping (shape_for): validates the columns of each row for a task, decides
// the dataset's form (plain text or conversational) from its first good row
// and holds every other row to it, and normalises rows (see Shaped).
//
// Bad rows (invalid JSON, not an object, missing column, wrong type, other
// form than the first row) are errors unless LoadOptions::skip_bad_rows, which
// drops and counts them. Encoding errors are never skipped: a file in the wrong
// encoding would silently lose exactly its non-ASCII rows.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace trlx::data {

using Value = nlohmann::ordered_json;

struct Row {
  Value value;       // the row object, keys in file order
  std::string file;  // where it came from, for later errors
  size_t line = 0;   // 1-based line (of the element's start in a JSON array); 0: Parquet/Arrow
  std::optional<size_t> element;  // 0-based index in a JSON array file, or of the row in a Parquet/Arrow file

  // "file:line", "file:line (element N)" or "file (row N)", the prefix of every row error.
  std::string where() const;
};

struct LoadOptions {
  std::string split = "train";
  bool skip_bad_rows = false;
  // SFT: the column holding plain text (TRL's dataset_text_field).
  std::string text_field = "text";
};

struct Dataset {
  std::vector<Row> rows;
  size_t skipped = 0;                        // bad rows dropped (skip_bad_rows)
  std::vector<std::string> skip_examples;    // the first few reasons, for the log
  std::vector<std::string> files;            // files read, in order
};

// The dataset has no such split: a directory whose files name other splits
// (or none, for a split other than "train"), or a JSON object holding lists
// for other splits. A distinct error so that a caller wanting a split only if
// it exists can tell this from a broken file.
class MissingSplitError : public InputError {
 public:
  using InputError::InputError;
};

// Reads a file or directory (see above). Throws InputError (MissingSplitError
// when the split is not there).
Dataset load_dataset(const std::filesystem::path& path, const LoadOptions& options = {});

// In-memory readers, for tests and fuzzing; `file` names the source in errors.
// Rows are appended to `out`; they throw InputError like load_dataset does.
void read_jsonl_text(std::string_view text, const std::string& file, const LoadOptions& options,
                     Dataset& out);
void read_json_text(std::string_view text, const std::string& file, const LoadOptions& options,
                    Dataset& out);

enum class Task {
  sft,
  preference,           // dpo, cpo, orpo
  unpaired_preference,  // kto
  reward,
  prompt_only,          // grpo, rloo, ppo, online-dpo
};
enum class Form { text, conversational };
// SFT only: language modelling ("text" or "messages") or prompt+completion.
enum class SftLayout { none, language_modeling, prompt_completion };

std::string to_string(Task task);
std::string to_string(Form form);
// One paragraph for --help: the columns a task reads.
std::string describe(Task task);

// Normalised rows, per task. Rows are edited in place: keys keep the file's
// order, a column that shaping adds (an extracted "prompt", "messages" from
// "conversations", "text" from text_field) goes last as datasets.map puts it,
// and extra columns are kept. Unpaired KTO rows are new: prompt, completion,
// label, then the extra columns.
//   sft, language_modeling: "text" (string; taken from options.text_field) or
//        "messages" (list of messages; a ShareGPT "conversations" column of
//        {from, value} is converted as TRL does);
//   sft, prompt_completion: "prompt", "completion";
//   preference: "prompt", "chosen", "rejected" (an implicit prompt is
//        extracted from chosen/rejected as TRL's maybe_extract_prompt does:
//        also when "prompt" is plain text beside conversations; a
//        conversational prompt beside plain texts is an error). Rows are
//        taken one by one: TRL decides from the first row whether to extract,
//        here each row without a prompt gets one;
//   unpaired_preference: "prompt", "completion", "label" (bool); paired rows
//        are first given a prompt as above, then unpaired as TRL's
//        unpair_preference_dataset does (chosen rows of each block of 1000,
//        then its rejected rows);
//   reward: "chosen", "rejected", optional "prompt" (a shared prefix the
//        trainer prepends to both), optional "margin" (number; all rows or none);
//   prompt_only: "prompt".
// All text columns of all rows have the same form: strings, or lists of
// messages {role: string, content: string | null | list of {type, ...}}
// (content may be absent when the message has tool_calls). An extracted
// conversational prompt may be an empty list.
struct Shaped {
  Task task = Task::sft;
  Form form = Form::text;
  SftLayout sft_layout = SftLayout::none;
  bool has_margin = false;        // reward
  size_t prompts_extracted = 0;   // preference rows whose prompt was implicit
  size_t unpaired_from = 0;       // kto: paired rows that were unpaired
  std::vector<Row> rows;
  size_t skipped = 0;             // load + shape, when skip_bad_rows
  std::vector<std::string> skip_examples;
  std::vector<std::string> files;
};

Shaped shape_for(Task task, Dataset dataset, const LoadOptions& options = {});

// load_dataset + shape_for.
Shaped load_for(Task task, const std::filesystem::path& path, const LoadOptions& options = {});

// --- TRL's data_utils semantics, exposed for tests --------------------------

// Python `==` on JSON values: object key order does not matter, and numbers
// (bools included) compare by value.
bool py_equal(const Value& a, const Value& b);

// TRL's is_conversational on a row: a supported column (prompt, chosen,
// rejected, completion, messages) holding a list whose first element is an
// object with "role". TRL looks at one such column, picked by Python set
// order; this is true when any of them holds messages (shape_for separately
// requires all of a row's text columns to have one form).
bool is_conversational(const Value& row);

struct PromptSplit {
  Value prompt, chosen, rejected;
};
// TRL's extract_prompt: the longest common prefix of chosen and rejected
// (strings: by Unicode code point; lists: by element) becomes the prompt. A
// prompt that would end in a space gives the space back to the completions.
// When one side is a prefix of the other the last shared element stays in the
// completions. Both must be non-empty and of the same kind (InputError
// otherwise, with no location: callers add it).
PromptSplit extract_prompt(const Value& chosen, const Value& rejected);

}  // namespace trlx::data
