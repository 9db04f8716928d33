// Rows sharing their start run it once (engine/shared_prefix): the packed
// layout and its index, the cases that are not packed, and the tiny model's
// hidden states through packed rows against the separate rows', at real
// tokens and (keep_padding) at padding.
#include "catch_torch.hpp"

#include <limits>

#include "engine/shared_prefix.hpp"
#include "model/loading.hpp"
#include "support.hpp"

using namespace trlx;

namespace {

// Right-padded rows [N, T] with pad 0 and their attention mask.
std::pair<torch::Tensor, torch::Tensor> rows_of(const std::vector<std::vector<int64_t>>& rows, int64_t t) {
  auto ids = torch::zeros({static_cast<int64_t>(rows.size()), t}, torch::kInt64);
  auto attn = torch::zeros_like(ids);
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t j = 0; j < rows[r].size(); ++j) {
      ids[static_cast<int64_t>(r)][static_cast<int64_t>(j)] = rows[r][j];
      attn[static_cast<int64_t>(r)][static_cast<int64_t>(j)] = 1;
    }
  return {ids, attn};
}

std::vector<int64_t> vec(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

engine::ShareOptions always(bool keep_padding = false) {
  engine::ShareOptions o;
  o.keep_padding = keep_padding;
  o.max_cost = std::numeric_limits<double>::infinity();
  return o;
}

// Three groups of rows of width 14, seeded: a pair with a long common start
// (rows 0, 1), three rows of one prompt (2, 3, 4; row 3 ends where the
// prompt ends), and a row alone (5).
std::vector<std::vector<int64_t>> grouped_rows(uint64_t seed) {
  torch::manual_seed(seed);
  auto tokens = [&](int64_t n) { return vec(torch::randint(1, 200, {n}, torch::kInt64)); };
  auto cat = [](std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto p1 = tokens(9), p2 = tokens(6);
  return {cat(p1, tokens(4)), cat(p1, tokens(2)), cat(p2, tokens(5)), p2, cat(p2, tokens(3)), tokens(7)};
}

}  // namespace

TEST_CASE("share_prefixes packs each group's common start once, then each member's remainder as a branch",
          "[engine][shared_prefix]") {
  auto [ids, attn] = rows_of({{1, 2, 3, 4}, {1, 2, 5}, {7, 8, 9, 9, 9}}, 5);
  auto m = engine::share_prefixes(ids, attn, {{0, 1}, {2}}, /*pad_id=*/0, always());
  REQUIRE(m.count("shared_input_ids"));
  // Group {0, 1}: start 1 2, then 3 4 (positions 2 3), then 5 (position 2 again).
  CHECK(vec(m.at("shared_input_ids")) == std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 9, 9, 9});
  CHECK(vec(m.at("shared_position_ids")) == std::vector<int64_t>{0, 1, 2, 3, 2, 0, 1, 2, 3, 4});
  CHECK(vec(m.at("shared_attention_mask")) == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(vec(m.at("shared_document_ids")) == std::vector<int64_t>(10, 0));
  // Every slot of the collated rows: where its token is (padding: its group's first slot).
  CHECK(vec(m.at("shared_index")) == std::vector<int64_t>{0, 1, 2, 3, 0, /**/ 0, 1, 4, 0, 0, /**/ 5, 6, 7, 8, 9});

  // keep_padding lays each member's padding out after its tokens, at the
  // positions a separate row gives it.
  m = engine::share_prefixes(ids, attn, {{0, 1}, {2}}, 0, always(true));
  CHECK(vec(m.at("shared_input_ids")) == std::vector<int64_t>{1, 2, 3, 4, 0, 5, 0, 0, 7, 8, 9, 9, 9, 0, 0, 0});
  CHECK(vec(m.at("shared_position_ids")) == std::vector<int64_t>{0, 1, 2, 3, 4, 2, 3, 4, 0, 1, 2, 3, 4, 0, 0, 0});
  CHECK(vec(m.at("shared_attention_mask")) == std::vector<int64_t>{1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0});
  CHECK(vec(m.at("shared_index")) == std::vector<int64_t>{0, 1, 2, 3, 4, /**/ 0, 1, 5, 6, 7, /**/ 8, 9, 10, 11, 12});

  // Identical rows: the whole row is the start, the remainders are empty.
  auto [same, same_attn] = rows_of({{4, 5, 6}, {4, 5, 6}}, 3);
  m = engine::share_prefixes(same, same_attn, engine::pair_groups(1), 0, always());
  CHECK(vec(m.at("shared_input_ids")) == std::vector<int64_t>{4, 5, 6});
  CHECK(vec(m.at("shared_index")) == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(engine::pair_groups(2) == std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}});
}

TEST_CASE("share_prefixes packs nothing where it saves no work or the rows are not right-padded, and bad groups are errors",
          "[engine][shared_prefix]") {
  auto [ids, attn] = rows_of({{1, 2, 3, 4}, {9, 8, 5, 6}}, 4);
  // No common start: 8 packed slots against 8 is above the default 0.9.
  CHECK(engine::share_prefixes(ids, attn, {{0, 1}}, 0).empty());
  CHECK_FALSE(engine::share_prefixes(ids, attn, {{0, 1}}, 0, always()).empty());
  engine::ShareOptions tight;
  tight.max_cost = engine::forward_cost(1, 6.5);
  CHECK(engine::share_prefixes(ids, attn, {{0, 1}}, 0, tight).empty());
  auto [long_ids, long_attn] = rows_of({{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 9}}, 8);
  auto m = engine::share_prefixes(long_ids, long_attn, {{0, 1}}, 0);
  REQUIRE(m.count("shared_input_ids"));
  CHECK(m.at("shared_input_ids").size(1) == 9);
  // Left padding: not packed.
  auto left = attn.clone();
  left[0][0] = 0;
  CHECK(engine::share_prefixes(ids, left, {{0, 1}}, 0, always()).empty());
  CHECK_THROWS_WITH(engine::share_prefixes(ids, attn, {{0, 1}, {1}}, 0, always()), Catch::Matchers::Contains("two groups"));
  CHECK_THROWS_WITH(engine::share_prefixes(ids, attn, {{0}}, 0, always()), Catch::Matchers::Contains("every row"));
  CHECK_THROWS_WITH(engine::share_prefixes(ids, attn, {{0, 2}}, 0, always()), Catch::Matchers::Contains("out of"));
}

TEST_CASE("Hidden states through packed rows equal the separate rows' at real tokens, and at padding with keep_padding",
          "[engine][shared_prefix][model]") {
  auto model = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
  model->eval();
  torch::NoGradGuard ng;
  const auto rows = grouped_rows(3);
  const int64_t t = 14;
  auto [ids, attn] = rows_of(rows, t);
  // Separate rows with explicit positions: padding at its slot index.
  auto positions = torch::arange(t, torch::kInt64).unsqueeze(0).expand({ids.size(0), t}).contiguous();
  auto separate = model->hidden_states({ids, attn, positions, {}});
  for (bool keep : {false, true}) {
    INFO("keep_padding " << keep);
    auto m = engine::share_prefixes(ids, attn, {{0, 1}, {2, 3, 4}, {5}}, 0, always(keep));
    REQUIRE(m.count("shared_input_ids"));
    auto packed = model->hidden_states({m.at("shared_input_ids"), m.at("shared_attention_mask"),
                                        m.at("shared_position_ids"), m.at("shared_document_ids")});
    // Given the branch reach worked out before (as the engine does while
    // collating), the model uses it: the same states; given none, it sees
    // no branches and they differ.
    model::Batch given{m.at("shared_input_ids"), m.at("shared_attention_mask"), m.at("shared_position_ids"),
                       m.at("shared_document_ids")};
    given.branch_reach = model::branch_reach(given.position_ids, given.document_ids, given.attention_mask);
    REQUIRE(given.branch_reach.numel() > 0);
    CHECK(torch::equal(model->hidden_states(given), packed));
    given.branch_reach = torch::empty({0}, torch::kInt64);
    CHECK((model->hidden_states(given) - packed).abs().max().item<double>() > 1e-3);
    const int64_t h = packed.size(-1);
    auto gathered = packed.reshape({-1, h}).index_select(0, m.at("shared_index")).view({ids.size(0), t, h});
    auto where = keep ? torch::ones_like(attn).to(torch::kBool) : attn.to(torch::kBool);
    const double diff = (gathered - separate).abs().index({where}).max().item<double>();
    CHECK(diff < 1e-5);
    if (!keep) {
      // Padding is not laid out: some padding slot differs, so the check above can fail.
      CHECK((gathered - separate).abs().index({attn.logical_not()}).max().item<double>() > 1e-3);
    }
  }
}

TEST_CASE("share_prefixes with wanted_from counts the packed slots from the first one read and sends the rest to a zero row",
          "[engine][shared_prefix]") {
  auto [ids, attn] = rows_of({{1, 2, 3, 4}, {1, 2, 5}, {7, 8, 9, 9, 9}}, 5);
  auto o = always();
  o.wanted_from = {2, 2, 3};
  auto m = engine::share_prefixes(ids, attn, {{0, 1}, {2}}, 0, o);
  REQUIRE(m.count("shared_outputs_from"));
  // Packed slots 1 2 3 4 5 | 7 8 9 9 9; the first slot read is 2 (row 0's),
  // so each packed row keeps 3 slots and slot 6 is the zero row.
  CHECK(engine::host_count(m, "shared_outputs_from") == 2);
  CHECK(vec(m.at("shared_index")) == std::vector<int64_t>{6, 6, 0, 1, 6, /**/ 6, 6, 2, 6, 6, /**/ 6, 6, 6, 4, 5});
  // Not packed (no saving): the rows' own first position read, for forward_rows.
  o.max_cost = 0.0;
  m = engine::share_prefixes(ids, attn, {{0, 1}, {2}}, 0, o);
  CHECK_FALSE(m.count("shared_input_ids"));
  CHECK(engine::host_count(m, "outputs_from") == 2);
  // A row that reads nothing (T) does not hold the others back; none reading: no cut.
  CHECK(engine::first_predicting(torch::tensor({{0, 0, 1, 1}, {0, 0, 0, 0}, {1, 1, 0, 0}})) ==
        std::vector<int64_t>{1, 4, 0});
  CHECK(engine::host_count(engine::rows_outputs_from({3, 4}, 4), "outputs_from") == 3);
  CHECK(engine::rows_outputs_from({4, 4}, 4).empty());
  CHECK(engine::rows_outputs_from({0, 3}, 4).empty());
  o.wanted_from = {2, 9, 3};
  CHECK_THROWS(engine::share_prefixes(ids, attn, {{0, 1}, {2}}, 0, o));
}

TEST_CASE("Hidden states through packed rows cut by wanted_from equal the separate rows' where read, zero before",
          "[engine][shared_prefix][model]") {
  auto model = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
  model->eval();
  torch::NoGradGuard ng;
  const auto rows = grouped_rows(3);
  const int64_t t = 14;
  auto [ids, attn] = rows_of(rows, t);
  auto positions = torch::arange(t, torch::kInt64).unsqueeze(0).expand({ids.size(0), t}).contiguous();
  auto separate = model->hidden_states({ids, attn, positions, {}});
  const std::vector<int64_t> wanted = {8, 10, 5, t, 6, 3};
  for (bool keep : {false, true}) {
    INFO("keep_padding " << keep);
    auto o = always(keep);
    o.wanted_from = wanted;
    auto m = engine::share_prefixes(ids, attn, {{0, 1}, {2, 3, 4}, {5}}, 0, o);
    REQUIRE(m.count("shared_outputs_from"));
    model::Batch b{m.at("shared_input_ids"), m.at("shared_attention_mask"), m.at("shared_position_ids"),
                   m.at("shared_document_ids")};
    b.outputs_from = engine::host_count(m, "shared_outputs_from");
    auto packed = model->hidden_states(b);
    const int64_t h = packed.size(-1);
    auto flat = torch::cat({packed.reshape({-1, h}), torch::zeros({1, h})});
    auto gathered = flat.index_select(0, m.at("shared_index")).view({ids.size(0), t, h});
    for (int64_t r = 0; r < ids.size(0); ++r) {
      INFO("row " << r);
      const int64_t w = wanted[static_cast<size_t>(r)], real = static_cast<int64_t>(rows[static_cast<size_t>(r)].size());
      const int64_t end = keep ? t : real;
      if (w < end) CHECK((gathered[r].slice(0, w, end) - separate[r].slice(0, w, end)).abs().max().item<double>() < 1e-5);
      CHECK(gathered[r].slice(0, 0, std::min(w, t)).abs().sum().item<double>() == 0.0);
    }
  }
}
