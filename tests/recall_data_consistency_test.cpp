// The recall model is trained on text from tools/recall/{words,data}.py and examined with text from
// src/harness/transcript.cpp. These tests read the Python sources as text and check that every sentence,
// question, name and place the harness produces is one the training data was built from, so editing one
// side without the other fails here rather than as a silent recall drop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/transcript.h"

using namespace kvtax::harness;

namespace {

const std::string kRecall = std::string(KVTAX_SOURCE_DIR) + "/tools/recall/";

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every "..." literal of a Python source (the files use double quotes for text and no escapes inside).
std::set<std::string> string_literals(const std::string& src) {
  std::set<std::string> out;
  for (size_t i = src.find('"'); i != std::string::npos; i = src.find('"', i + 1)) {
    if (src.compare(i, 3, "\"\"\"") == 0) {  // skip docstrings and the NAMES block
      const size_t end = src.find("\"\"\"", i + 3);
      if (end == std::string::npos) break;
      i = end + 2;
      continue;
    }
    const size_t end = src.find('"', i + 1);
    if (end == std::string::npos) break;
    out.insert(src.substr(i + 1, end - i - 1));
    i = end;
  }
  return out;
}

// The whitespace-separated words of words.py's `NAMES = """..."""` block, in order.
std::vector<std::string> python_names(const std::string& src) {
  const std::string open = "NAMES = \"\"\"";
  const size_t b = src.find(open);
  if (b == std::string::npos) return {};
  const size_t e = src.find("\"\"\"", b + open.size());
  std::istringstream in(src.substr(b + open.size(), e - b - open.size()));
  std::vector<std::string> names;
  for (std::string w; in >> w;) names.push_back(w);
  return names;
}

// "A. B c. D. " -> {"A.", "B c.", "D."}
std::vector<std::string> sentences(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = text.find(". "); i != std::string::npos; i = text.find(". ", start)) {
    out.push_back(text.substr(start, i + 1 - start));
    start = i + 2;
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

std::string rstrip(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

class RecallDataConsistency : public testing::Test {
 protected:
  void SetUp() override {
    words_ = slurp(kRecall + "words.py");
    data_ = slurp(kRecall + "data.py");
    ASSERT_FALSE(words_.empty()) << kRecall << "words.py missing";
    ASSERT_FALSE(data_.empty()) << kRecall << "data.py missing";
    literals_ = string_literals(words_);
    literals_.merge(string_literals(data_));
  }
  bool trained(const std::string& s) const { return literals_.count(s) > 0; }
  bool covered(const std::string& s) const;

  std::string words_, data_;
  std::set<std::string> literals_;
};

TEST_F(RecallDataConsistency, VaultNamesAreTheFirstFiftyTrainingNames) {
  const auto names = python_names(words_);
  ASSERT_GE(names.size(), 50u);
  const std::set<std::string> first50(names.begin(), names.begin() + 50);
  std::set<std::string> harness;
  for (const Fact& f : random_facts(50, 1)) harness.insert(f.name);
  EXPECT_EQ(harness, first50);
  for (const Fact& f : default_facts()) EXPECT_TRUE(first50.count(f.name)) << f.name;
}

TEST_F(RecallDataConsistency, FactSentenceAndQuestionsAreTrainingTemplates) {
  const Fact slot{"{n}", "{c}"};
  EXPECT_TRUE(trained(rstrip(fact_sentence(slot)))) << fact_sentence(slot);
  EXPECT_TRUE(trained(binding_question(slot))) << binding_question(slot);
  EXPECT_TRUE(trained(recall_question({slot}))) << recall_question({slot});

  // The all-facts question is an f-string in data.py: its two pieces, with the count and names filled in.
  const std::string head = "List the access codes for all {cnt} vaults mentioned above, in order ({', '.join(names)}). ";
  const std::string tail = "Answer with just the {cnt} codes.";
  ASSERT_NE(data_.find(head), std::string::npos) << "data.py's all_question changed";
  ASSERT_NE(data_.find(tail), std::string::npos) << "data.py's all_question changed";
  const auto facts = default_facts();
  std::string names;
  for (const Fact& f : facts) names += (names.empty() ? "" : ", ") + f.name;
  const std::string expected = "List the access codes for all five vaults mentioned above, in order (" + names +
                               "). Answer with just the five codes.";
  EXPECT_EQ(recall_question(facts), expected);
}

// A harness filler sentence is covered when the training data holds it verbatim, when it is a "Facilities
// report for the PLACE[, day N]." header (words in the training vocabulary, PLACE in its place list), or when
// it joins two trained sentences with ", and " (the original probe's paragraph does that once).
bool RecallDataConsistency::covered(const std::string& s) const {
  if (trained(s)) return true;
  const std::string report = "Facilities report for the ";
  if (s.rfind(report, 0) == 0) {
    const size_t end = std::min(s.find(','), s.size() - 1);
    return words_.find("Facilities report day") != std::string::npos && trained(s.substr(report.size(), end - report.size()));
  }
  const size_t join = s.find(", and ");
  if (join == std::string::npos) return false;
  std::string second = s.substr(join + 6);
  second[0] = char(std::toupper(static_cast<unsigned char>(second[0])));
  return trained(s.substr(0, join) + ".") && trained(second);
}

TEST_F(RecallDataConsistency, FillerSentencesAreTrainingSentences) {
  for (const std::string& s : sentences(filler_block(FillerKind::repeat, 0, 0)))
    EXPECT_TRUE(covered(s)) << "repeat filler: " << s;
  for (uint64_t seed : {0ull, 1ull, 42ull})
    for (size_t block = 0; block < 40; ++block)
      for (const std::string& s : sentences(filler_block(FillerKind::varied, seed, block)))
        EXPECT_TRUE(covered(s)) << "varied filler (seed " << seed << ", block " << block << "): " << s;
  EXPECT_FALSE(covered("The vault door was left open overnight."));
}

TEST(RecallDataParsing, SentenceSplitAndLiteralsWork) {
  EXPECT_EQ(sentences("A b. C d. "), (std::vector<std::string>{"A b.", "C d."}));
  EXPECT_EQ(string_literals("x = [\"a b\", \"c\"]\n\"\"\"doc \"q\" \"\"\""), (std::set<std::string>{"a b", "c"}));
  EXPECT_EQ(python_names("NAMES = \"\"\"A B\nC\"\"\".split()"), (std::vector<std::string>{"A", "B", "C"}));
}

}  // namespace
