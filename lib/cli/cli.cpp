// The `trlx` command line: one table of commands; trainer commands and the
// config tools take their flags from the trainer's config table.
#include "cli/cli.hpp"
#include "cli/parse.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/ranges.h>

#include "config/accelerate.hpp"
#include "config/hub_paths.hpp"
#include "config/loader.hpp"
#include "config/training.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "dist/env/launcher_env.hpp"
#include "trainers/registry.hpp"

namespace trlx::cli {

int run_merge_lora(std::vector<std::string> args);  // lib/cli/lora_commands.cpp
int run_launch(const std::string& name, std::vector<std::string> args);  // lib/cli/launch_command.cpp

namespace {

struct Command {
  std::string name;
  std::string summary;
  int (*run)(const std::string& name, std::vector<std::string> args);
};

int run_trainer(const std::string& name, std::vector<std::string> args);
int run_preview(const std::string& name, std::vector<std::string> args);
int run_validate(const std::string& name, std::vector<std::string> args);
int run_print_config(const std::string& name, std::vector<std::string> args);
int run_docs(const std::string& name, std::vector<std::string> args);
int run_env_cmd(const std::string&, std::vector<std::string> args) { return run_env(args); }
int run_init_model_cmd(const std::string&, std::vector<std::string> args) { return run_init_model(std::move(args)); }
int run_generate_cmd(const std::string&, std::vector<std::string> args) { return run_generate(std::move(args)); }
int run_score_cmd(const std::string&, std::vector<std::string> args) { return run_score(std::move(args)); }
int run_tokenize_cmd(const std::string&, std::vector<std::string> args) { return run_tokenize(std::move(args)); }
int run_render_template_cmd(const std::string&, std::vector<std::string> args) { return run_render_template(std::move(args)); }
int run_merge_lora_cmd(const std::string&, std::vector<std::string> args) { return run_merge_lora(std::move(args)); }

std::vector<Command> command_table() {
  std::vector<Command> cmds;
  for (const auto& t : trainers::trainer_table()) cmds.push_back({t.name, t.schema().summary(), &run_trainer});
  cmds.push_back({"validate", "Check a config (and its accelerate config) without running anything", &run_validate});
  cmds.push_back({"preview", "Show what a trainer will train on: rendered examples, token counts, loss tokens marked", &run_preview});
  cmds.push_back({"print-config", "Print the fully resolved config as YAML, with where each value came from", &run_print_config});
  cmds.push_back({"init-model", "Write a new random model in Hugging Face format (tests, quickstarts)", &run_init_model_cmd});
  cmds.push_back({"merge-lora", "Fold a LoRA adapter (PEFT format) into its base model: a plain Hugging Face model", &run_merge_lora_cmd});
  cmds.push_back({"generate", "Generate from a model directory (greedy or sampled, optional chat template)", &run_generate_cmd});
  cmds.push_back({"score", "Log-probs of completions (causal LM) or rewards (score model) for rows of a JSONL file", &run_score_cmd});
  cmds.push_back({"tokenize", "Token ids and strings of text with a tokenizer (or --decode ids), as the trainers tokenize", &run_tokenize_cmd});
  cmds.push_back({"render-template", "Render a conversation through a chat template (and its assistant mask)", &run_render_template_cmd});
  cmds.push_back({"launch", "Start N ranks of a command on this machine (trlx launch --nproc_per_node 2 -- trlx sft ...)", &run_launch});
  cmds.push_back({"env", "Versions, devices and launcher environment (paste this into bug reports)", &run_env_cmd});
  cmds.push_back({"docs", "Print the config reference (Markdown) generated from the config tables", &run_docs});
  return cmds;
}

std::string version_line() { return fmt::format("trlx {}", version()); }

void print_top_help() {
  std::cout << version_line() << " - post-train language models: SFT, preference and RL trainers\n\n"
            << "Usage: trlx <command> [--config FILE] [--field value ...]\n\n"
            << "Commands:\n";
  for (const auto& c : command_table()) std::cout << fmt::format("  {:<17}{}\n", c.name, c.summary);
  std::cout << "\nOptions:\n  -h, --help    Show this help\n  --version     Show the version\n\n"
            << "`trlx <command> --help` lists a command's flags. Config files use TRL's field names;\n"
            << "flags override the file: trlx dpo --config dpo.yaml --beta 0.2\n";
}

// Binds every field of `schema` as a --flag on `app`. Values are kept as text;
// the config loader parses them so that flag and YAML errors read alike.
struct FlagBinding {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  // --no_<field> for a boolean defaulting to true, as TRL's argument parser
  // takes it (--no_remove_unused_columns): the field set to false.
  std::vector<std::pair<std::string, CLI::Option*>> negations;
};

void bind_schema_flags(CLI::App& app, const config::Schema& schema, FlagBinding& binding) {
  for (const auto& f : schema.fields()) {
    std::string help = f.help;
    const std::string c = f.constraint_text();
    if (!c.empty()) help += " [" + c + "]";
    // The default goes into the text: CLI11 would also use a default string
    // as the value of a bare boolean flag.
    help += " (default: " + config::format_value(f.default_value) + ")";
    CLI::Option* opt = app.add_option("--" + f.name, binding.values[f.name], help);
    opt->group(f.group);
    switch (f.kind) {
      case config::Kind::Bool: opt->expected(0, 1)->type_name("BOOL"); break;
      case config::Kind::Int: opt->expected(1)->type_name("INT"); break;
      case config::Kind::Float: opt->expected(1)->type_name("FLOAT"); break;
      case config::Kind::String: opt->expected(1)->type_name("TEXT"); break;
      case config::Kind::StringList: opt->expected(1, -1)->type_name("TEXT ..."); break;
      case config::Kind::FloatList: opt->expected(1, -1)->type_name("FLOAT ..."); break;
    }
    // Given twice, a flag takes its last value, as on TRL's command line; a
    // list's values follow one flag (--loss_type sigmoid hinge), and the
    // separator CLI11 injects between occurrences lets the last one win.
    if (f.kind != config::Kind::StringList && f.kind != config::Kind::FloatList)
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    else
      opt->inject_separator();
    binding.options.emplace_back(f.name, opt);
    if (f.kind == config::Kind::Bool && f.default_value == config::Value(true)) {
      CLI::Option* no = app.add_flag("--no_" + f.name);
      no->description("Sets " + f.name + " to false");
      no->group("");  // hidden
      binding.negations.emplace_back(f.name, no);
    }
  }
  for (const auto& a : schema.aliases()) {
    const config::FieldSpec* f = schema.find(a.new_name);
    CLI::Option* opt = app.add_option("--" + a.old_name, binding.values[a.old_name], "Old name of --" + a.new_name);
    opt->group("");  // hidden
    if (f && (f->kind == config::Kind::StringList || f->kind == config::Kind::FloatList))
      opt->expected(1, -1)->inject_separator();
    else if (f && f->kind == config::Kind::Bool) opt->expected(0, 1);
    else opt->expected(1);
    binding.options.emplace_back(a.old_name, opt);
  }
}

// The config file, the flags and the leftovers (unknown flags) go to the loader.
config::Sources collect_sources(const CLI::App& app, const std::string& config_path, const FlagBinding& binding,
                                std::vector<std::string>& unknown) {
  config::Sources src;
  if (!config_path.empty()) src.yaml_file = config_path;
  for (const auto& [name, opt] : binding.options) {
    if (opt->count() == 0) continue;
    // A flag given twice (a script's default, then an override): the last
    // one wins, as on TRL's command line, lists included (the values after
    // the last occurrence: CLI11 puts an empty separator between occurrences).
    std::vector<std::string> vals;
    for (const auto& r : opt->get_inject_separator() ? opt->results() : opt->reduced_results()) {
      if (!r.empty()) vals.push_back(r);
      else if (opt->get_inject_separator()) vals.clear();
    }
    // A flag given no value would take the next flag as its value (a list
    // flag takes one or more): say so instead.
    if (!vals.empty() && vals.front().rfind("--", 0) == 0) {
      const std::string next = vals.front().substr(2, vals.front().find('=') - 2);
      const bool is_flag = std::any_of(binding.options.begin(), binding.options.end(),
                                       [&](const auto& o) { return o.first == next; }) ||
                           next == "config";
      if (is_flag)
        throw InputError(fmt::format("--{} has no value before {} (give it one; for a list, --{} null is an empty one)",
                                     name, vals.front(), name));
    }
    src.flags.emplace_back(name, vals);
  }
  for (const auto& [name, opt] : binding.negations)
    if (opt->count() > 0) src.flags.emplace_back(name, std::vector<std::string>{"false"});
  for (const auto& extra : app.remaining()) unknown.push_back(extra);
  return src;
}

// Leftover arguments: a section given as one JSON object
// (--model_init_kwargs '{"dtype": "bfloat16"}', which no option is bound to)
// sets its keys; other unknown flags get a "did you mean", stray words an
// error.
void report_unknown(const std::vector<std::string>& unknown, config::ConfigLoader& loader, const std::string& cmd) {
  for (size_t i = 0; i < unknown.size(); ++i) {
    const auto& u = unknown[i];
    if (starts_with(u, "--")) {
      std::string name = u.substr(2);
      std::vector<std::string> values;
      if (auto eq = name.find('='); eq != std::string::npos) {
        values.push_back(name.substr(eq + 1));
        name = name.substr(0, eq);
      }
      // The words after an unknown flag are its values.
      while (i + 1 < unknown.size() && !starts_with(unknown[i + 1], "-")) values.push_back(unknown[++i]);
      loader.apply_flag(name, values.size() == 1 ? values : std::vector<std::string>{"?"});
    } else if (!starts_with(u, "-")) {
      throw InputError(fmt::format("trlx {}: unexpected argument `{}`; flags take the form --field value", cmd, u));
    } else {
      throw InputError(fmt::format("trlx {}: unknown option `{}`", cmd, u));
    }
  }
}

struct ResolvedRun {
  const trainers::TrainerEntry* trainer = nullptr;
  std::shared_ptr<config::ConfigLoader> loader;
  std::unique_ptr<trainers::ResolvedTrainer> resolved;
  std::optional<config::DistributedConfig> dist;
  std::vector<config::HubResolution> hub;  // hub names in the config and their cache paths
};

// Reads the trainer named by `trainer:` in a YAML file, if any.
std::string trainer_from_file(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (starts_with(line, "trainer:")) {
      std::string v = trim(line.substr(8));
      if (auto hash = v.find(" #"); hash != std::string::npos) v = trim(v.substr(0, hash));
      if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'')) v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "";
}

// Finds the value of --config in raw arguments (before the real parse).
std::string peek_config(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) return args[i + 1];
    if (starts_with(args[i], "--config=")) return args[i].substr(9);
  }
  return "";
}

const trainers::TrainerEntry& require_trainer(const std::string& name, const std::string& hint_cmd) {
  if (const auto* t = trainers::find_trainer(name)) return *t;
  std::vector<std::string> names;
  for (const auto& t : trainers::trainer_table()) names.push_back(t.name);
  std::string msg = fmt::format("unknown trainer `{}`; trainers: {}", name, join(names, ", "));
  const std::string near = closest_match(name, names);
  if (!near.empty()) msg += fmt::format(" (did you mean `{}`?)", near);
  if (!hint_cmd.empty()) msg += fmt::format(". Usage: trlx {} <trainer> --config FILE", hint_cmd);
  throw InputError(msg);
}

// Shared by the trainer commands, validate and print-config: parse flags for
// `trainer`, load the YAML, resolve, read the accelerate config.
// Hub names (model_name_or_path: org/name, ...) become snapshot paths in the
// Hugging Face cache here, for every command: `hub` says whether missing ones
// are downloaded (a run) or only noted (validate, print-config).
// Hub names in the config become cache paths (downloaded when `mode` fetches).
void resolve_hub(ResolvedRun& run, config::HubMode mode) {
  run.hub = config::resolve_hub_paths(run.trainer->schema(), run.resolved->config_struct(), mode, run.loader.get());
  if (mode == config::HubMode::Fetch)
    for (const auto& h : run.hub) log::info("{}", h.note);
}

// `hub`: resolve hub names in that mode; nullopt leaves them to the caller
// (preview resolves them only for a trainer it can preview).
std::optional<ResolvedRun> resolve_run(const trainers::TrainerEntry& trainer, const std::string& cmd,
                                       std::vector<std::string> args, int* exit_code,
                                       std::optional<config::HubMode> hub) {
  const config::Schema& schema = trainer.schema();
  CLI::App app(fmt::format("{} - {}", cmd == trainer.name ? "trlx " + trainer.name : "trlx " + cmd + " " + trainer.name,
                           schema.summary()),
               "trlx " + cmd);
  app.allow_extras();
  std::string config_path;
  app.add_option("--config", config_path, "YAML config file (TRL field names); flags override it")
      ->check(CLI::ExistingFile)
      ->group("general");
  app.footer("A flag overrides the config file; given twice, it takes its last value. A list takes its values "
             "after one flag (--loss_type sigmoid hinge); --name null empties it.");
  FlagBinding binding;
  bind_schema_flags(app, schema, binding);
  if (auto rc = parse_args(app, args)) {
    *exit_code = *rc;
    return std::nullopt;
  }
  std::vector<std::string> unknown;
  config::Sources src = collect_sources(app, config_path, binding, unknown);

  // A file written for another trainer fails on its first foreign key; say
  // what is really wrong instead.
  const std::string file_trainer = trainer_from_file(config_path);
  if (!file_trainer.empty() && file_trainer != trainer.name)
    throw InputError(fmt::format("{} says `trainer: {}` but the command is trlx {}; run trlx {} or change the file",
                                 config_path, file_trainer, trainer.name, file_trainer));

  ResolvedRun out;
  out.trainer = &trainer;
  out.loader = std::make_shared<config::ConfigLoader>(schema);
  if (src.yaml_file) {
    std::ifstream in(*src.yaml_file);
    std::stringstream ss;
    ss << in.rdbuf();
    if (config::looks_like_accelerate_config(ss.str()))
      throw InputError(fmt::format("{} is an accelerate config, not a training config; pass it as "
                                   "--accelerate_config {}",
                                   src.yaml_file->string(), src.yaml_file->string()));
    out.loader->load_yaml_file(*src.yaml_file);
  }
  for (const auto& [name, values] : src.flags) out.loader->apply_flag(name, values);
  report_unknown(unknown, *out.loader, cmd);
  out.resolved = trainer.resolve(*out.loader);
  config::set_run_config_json(out.loader->to_json());  // what logger programs receive

  const auto& tc = out.resolved->config();
  log::set_level(tc.log_level);
  if (tc.accelerate_config) out.dist = config::read_accelerate_config(*tc.accelerate_config);
  if (hub) resolve_hub(out, *hub);
  return out;
}

int run_trainer(const std::string& name, std::vector<std::string> args) {
  const auto& trainer = require_trainer(name, "");
  int rc = 0;
  auto run = resolve_run(trainer, name, std::move(args), &rc, config::HubMode::Fetch);
  if (!run) return rc;
  return run->resolved->run();
}

// validate / print-config take an optional trainer name, else `trainer:` from
// the file; an accelerate config file is recognised and checked as one.
std::optional<ResolvedRun> resolve_for_tool(const std::string& cmd, std::vector<std::string>& args, int* rc,
                                            std::optional<config::DistributedConfig>* accel_only,
                                            std::optional<config::HubMode> hub) {
  std::string trainer_name;
  if (!args.empty() && !starts_with(args[0], "-")) {
    trainer_name = args[0];
    args.erase(args.begin());
  }
  const std::string path = peek_config(args);
  if (trainer_name.empty() && !path.empty()) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in && config::looks_like_accelerate_config(ss.str())) {
      *accel_only = config::parse_accelerate_config(ss.str(), path);
      return std::nullopt;
    }
    trainer_name = trainer_from_file(path);
  }
  if (trainer_name.empty()) {
    if (std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end()) {
      std::cout << fmt::format("Usage: trlx {} [<trainer>] --config FILE [--field value ...]\n", cmd)
                << "The trainer comes from the argument or from `trainer:` in the file; an accelerate\n"
                << "config file is recognised and checked on its own.\n";
      *rc = 0;
      return std::nullopt;
    }
    throw InputError(fmt::format(
        "trlx {}: which trainer is {} for? Name it (`trlx {} dpo --config {}`) or add `trainer: dpo` to the file",
        cmd, path.empty() ? "the config" : path, cmd, path.empty() ? "FILE" : path));
  }
  return resolve_run(require_trainer(trainer_name, cmd), cmd, args, rc, hub);
}

int run_preview(const std::string& cmd, std::vector<std::string> args) {
  size_t num_examples = 3;
  bool json = false;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--json") {
      json = true;
    } else if (args[i] == "--num_examples") {
      if (i + 1 >= args.size()) throw InputError("--num_examples needs a number");
      try {
        num_examples = static_cast<size_t>(std::stoul(args[++i]));
      } catch (const std::exception&) {
        throw InputError(fmt::format("--num_examples expects a number, found `{}`", args[i]));
      }
    } else {
      rest.push_back(args[i]);
    }
  }
  int rc = 0;
  std::optional<config::DistributedConfig> accel;
  auto run = resolve_for_tool(cmd, rest, &rc, &accel, std::nullopt);
  if (accel) throw InputError("trlx preview needs a training config, not an accelerate config");
  if (!run) return rc;
  if (!run->trainer->previews) {
    std::vector<std::string> can;
    for (const auto& t : trainers::trainer_table())
      if (t.previews) can.push_back(t.name);
    throw Error(fmt::format("trlx preview is not built for the {} trainer; it shows {}", run->trainer->name,
                                 fmt::join(can, ", ")));
  }
  resolve_hub(*run, config::HubMode::Fetch);
  return run->resolved->preview(num_examples, json);
}

int run_validate(const std::string& cmd, std::vector<std::string> args) {
  int rc = 0;
  std::optional<config::DistributedConfig> accel;
  auto run = resolve_for_tool(cmd, args, &rc, &accel, config::HubMode::CacheOnly);
  if (accel) {
    std::cout << fmt::format("{}: valid accelerate config ({}{}{})\n", peek_config(args), accel->describe(),
                             accel->mixed_precision != "no" ? ", mixed_precision " + accel->mixed_precision : "",
                             accel->num_processes ? fmt::format(", {} process{}", *accel->num_processes, *accel->num_processes == 1 ? "" : "es") : "");
    return 0;
  }
  if (!run) return rc;
  if (run->dist) {
    const auto& c = run->resolved->config();
    config::check_deepspeed_values(*run->dist, c.gradient_accumulation_steps, c.max_grad_norm);
  }
  const size_t warnings = run->loader->warnings().size() + (run->dist ? run->dist->warnings.size() : 0);
  std::cout << fmt::format("valid {} config{}; precision {}{}\n", run->trainer->name,
                           run->dist ? fmt::format("; distributed: {}", run->dist->describe()) : "",
                           run->resolved->config().use_bf16() ? "bf16 (mixed)" : "fp32",
                           warnings ? fmt::format(" ({} warning{})", warnings, warnings == 1 ? "" : "s") : "");
  for (const auto& h : run->hub) std::cout << "hub: " << h.note << "\n";
  return 0;
}

int run_print_config(const std::string& cmd, std::vector<std::string> args) {
  int rc = 0;
  std::optional<config::DistributedConfig> accel;
  auto run = resolve_for_tool(cmd, args, &rc, &accel, config::HubMode::Describe);
  if (accel) {
    const auto& d = *accel;
    std::cout << fmt::format("# accelerate config {} as trlx reads it\n", d.source)
              << fmt::format("strategy: {}\n", d.describe())
              << fmt::format("zero_stage: {}\noffload_optimizer_device: {}\noffload_param_device: {}\n", d.zero_stage,
                             d.offload_optimizer_device, d.offload_param_device)
              << fmt::format("reshard_after_forward: {}\nmixed_precision: {}\nnum_processes: {}\n",
                             d.reshard_after_forward, d.mixed_precision,
                             d.num_processes ? std::to_string(*d.num_processes) : "null");
    return 0;
  }
  if (!run) return rc;
  std::cout << fmt::format("# trlx {} config, resolved (defaults < {} < flags)\n", run->trainer->name,
                           peek_config(args).empty() ? "no file" : peek_config(args));
  // The hub names stay as written (the config stays portable to another
  // machine's cache); where each one is found here follows as a comment.
  std::cout << run->loader->to_yaml();
  for (const auto& h : run->hub) std::cout << "# hub: " << h.note << "\n";
  if (run->dist) std::cout << fmt::format("# distributed: {} (from {})\n", run->dist->describe(), run->dist->source);
  return 0;
}

int run_docs(const std::string&, std::vector<std::string> args) {
  CLI::App app("Print the config reference generated from the config tables", "trlx docs");
  if (auto rc = parse_args(app, args)) return *rc;
  std::cout << config_reference_markdown();
  return 0;
}

}  // namespace

// Parses `args` with CLI11. Returns an exit code when the command should stop
// here (help printed, or a usage error), nullopt to continue.
std::optional<int> parse_args(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector reversed
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw InputError(fmt::format("{}; run `{} --help`", e.what(), app.get_name()));
  }
  return std::nullopt;
}

std::string config_reference_markdown() {
  std::string out =
      "# trlx config reference\n\n"
      "Generated by `trlx docs` from the config tables in the source; do not edit by hand.\n"
      "Every field can be set in the YAML file given with `--config` or as a flag `--name value`;\n"
      "flags override the file, the file overrides the defaults. Nested keys are written\n"
      "`section.key` on the command line and as nested mappings in YAML.\n";
  for (const auto& t : trainers::trainer_table()) {
    const auto& s = t.schema();
    out += fmt::format("\n## trlx {}\n\n{}.\n", t.name, s.summary());
    std::string group;
    for (const auto& f : s.fields()) {
      if (f.group != group) {
        group = f.group;
        out += fmt::format("\n### {}\n\n| field | type | default | constraint | meaning |\n|---|---|---|---|---|\n", group);
      }
      std::string kind = config::kind_name(f.kind);
      if (f.nullable) kind += " or null";
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", f.name, kind, config::format_value(f.default_value),
                         f.constraint_text(), f.help);
    }
    if (!s.aliases().empty()) {
      out += "\nOld names accepted with a warning: ";
      std::vector<std::string> parts;
      for (const auto& a : s.aliases()) parts.push_back(fmt::format("`{}` → `{}`", a.old_name, a.new_name));
      out += join(parts, ", ") + ".\n";
    }
  }
  out += "\n## Accelerate configs\n\n`--accelerate_config` (or `accelerate_config:` in the file) takes a bundled preset — ";
  out += join(config::preset_names(), ", ");
  out += " — or the path of an accelerate config file, read unchanged. Keys trlx does not use get one warning each.\n";
  return out;
}

int run_cli(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Rank-aware logging from the first line on; a broken launcher environment
  // is itself reported.
  dist::LauncherEnv env;
  std::string level = "info";
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--log_level") level = args[i + 1] == "passive" ? "info" : args[i + 1];
  try {
    env = dist::detect_launcher();
    log::init(env.rank, env.world_size, level);
  } catch (const Error& e) {
    log::init(0, 1, "info");
    log::error("{}", e.what());
    return static_cast<int>(e.code());
  }
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      print_top_help();
      return args.empty() ? static_cast<int>(ExitCode::kBadInput) : 0;
    }
    if (args[0] == "--version" || args[0] == "-V") {
      std::cout << version_line() << "\n";
      return 0;
    }
    const std::string name = args[0];
    args.erase(args.begin());
    for (const auto& c : command_table())
      if (c.name == name) return c.run(name, std::move(args));
    std::vector<std::string> names;
    for (const auto& c : command_table()) names.push_back(c.name);
    std::string msg = fmt::format("unknown command `{}`", name);
    const std::string near = closest_match(name, names);
    if (!near.empty()) msg += fmt::format(" (did you mean `{}`?)", near);
    throw InputError(msg + "; `trlx --help` lists the commands");
  } catch (const Error& e) {
    log::error("{}", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    log::error("internal error: {}", e.what());
    return static_cast<int>(ExitCode::kRuntime);
  }
}

}  // namespace trlx::cli
