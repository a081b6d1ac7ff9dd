// `harness skills`: inspect a skill library.
//
//   harness skills search LIBRARY.jsonl "QUERY" [--top K] [--k1 X] [--b X] [--epsilon X]
//                                              [--seed N]
//
// prints one line per recalled skill, best first: rank, name and BM25 score (%.17g, so the value
// reads back as the same double), separated by tabs. When no skill scores above 0, the recall's
// keyed random sample is printed with score 0 and a note on stderr, as the selection agent would
// see it. A library with no skills is an error (exit 2) saying so; --top is at least 1 (more than the
// library holds prints them all).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "agents/bm25.h"
#include "agents/skill_library.h"
#include "core/cli.h"
#include "harness/cli/commands.h"

namespace vinci {
namespace {

namespace po = boost::program_options;

int skills_search(const std::vector<std::string>& args) {
  Bm25Params params;
  std::string library_path, query, top_text, seed_text;
  po::options_description named(
      "usage: harness skills search LIBRARY.jsonl \"QUERY\" [--top K]\n\n"
      "Ranks the library's skills for QUERY with BM25 (rank_bm25's BM25Okapi) and\n"
      "prints rank, name and score, tab separated, best first.\n\noptions");
  named.add_options()("help,h", "print this help")(
      "top", po::value<std::string>(&top_text)->default_value("20"),
      "how many skills to print, at most (>= 1; past the library's size: all)")(
      "k1", po::value<double>(&params.k1)->default_value(params.k1), "BM25 k1")(
      "b", po::value<double>(&params.b)->default_value(params.b), "BM25 b")(
      "epsilon", po::value<double>(&params.epsilon)->default_value(params.epsilon),
      "BM25 idf floor factor (of the average idf)")("seed", po::value<std::string>(&seed_text)->default_value("0"),
                                                    "seed of the random sample shown when nothing scores");
  po::variables_map vm;
  if (auto stop = parse_options("harness skills search", args, named, {{"library", 1}, {"query", 1}}, &vm))
    return *stop;
  if (!vm.count("library") || !vm.count("query")) {
    std::cerr << "harness skills search: expected a library file and a query\n" << named;
    return 2;
  }
  library_path = vm["library"].as<std::string>();
  query = vm["query"].as<std::string>();
  auto top_value = parse_int_option("--top", top_text, 1, INT64_MAX);
  if (!top_value.ok()) {
    std::fprintf(stderr, "harness skills search: %s\n", top_value.status().message().c_str());
    return 2;
  }
  const size_t top = static_cast<size_t>(*top_value);
  auto seed_value = parse_int_option("--seed", seed_text, 0, INT64_MAX);
  if (!seed_value.ok()) {
    std::fprintf(stderr, "harness skills search: %s\n", seed_value.status().message().c_str());
    return 2;
  }
  const uint64_t seed = static_cast<uint64_t>(*seed_value);
  if (Status st = validate_bm25_params(params); !st.ok()) {
    std::fprintf(stderr, "harness skills search: %s\n", st.message().c_str());
    return 2;
  }
  auto library = SkillLibrary::load(library_path);
  if (!library.ok()) {
    std::fprintf(stderr, "harness skills search: %s\n", library.status().to_string().c_str());
    return 2;
  }
  for (const auto& [name, line] : library->dropped_duplicates()) {
    std::fprintf(stderr, "note: %s:%zu: skill '%s' repeats an earlier name; the first is kept\n", library_path.c_str(),
                 line, name.c_str());
  }
  if (library->skills().empty()) {
    std::fprintf(stderr, "harness skills search: %s holds no skills: nothing to rank\n", library_path.c_str());
    return 2;
  }
  Bm25Index index(params);
  for (const Skill& s : library->skills()) index.add_text(skill_document_text(s));
  RngKey key = RngKey::root(seed).with("purpose", "bm25_fallback").with("query", query);
  Bm25Recall recall = bm25_recall(index, query, top, key);
  if (recall.random_fallback) {
    std::fprintf(stderr, "note: no skill scores above 0; a random sample (seed %llu) follows\n",
                 static_cast<unsigned long long>(seed));
  }
  for (size_t i = 0; i < recall.hits.size(); ++i) {
    const Bm25Hit& h = recall.hits[i];
    std::printf("%zu\t%s\t%.17g\n", i + 1, library->at(h.doc).name.c_str(), h.score);
  }
  return 0;
}

}  // namespace

int cmd_skills(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "search") {
    return skills_search(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::fprintf(stderr,
               "usage: harness skills search LIBRARY.jsonl \"QUERY\" [--top K]\n"
               "(`harness skills search --help` lists the options)\n");
  return args.size() == 1 && (args[0] == "--help" || args[0] == "-h") ? 0 : 2;
}

}  // namespace vinci
