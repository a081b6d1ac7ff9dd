// `replay cat RUN [--objects] [--no-manifest]`: prints a run as JSON lines.
//
// The first line is the manifest ({"manifest": {...}}) unless --no-manifest; then one line per
// record in log order. --objects inlines the objects each record names (kernel sources, prompts,
// skills). Damage in the log is reported on stderr with its file and offset after every good
// record is printed; the exit code is then 1. So is an object --objects finds damaged (printed as
// {"corrupt": "why"}) or missing (printed as {"missing": true}), each named on stderr; a run
// without its objects/ folder is refused with --objects (exit 2). A completed run's log that
// disagrees with its manifest's record count or digest (cut short at a frame boundary, say) is
// damage too.
#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "core/cli.h"
#include "recorder/record_json.h"
#include "recorder/run.h"
#include "replay/commands.h"

namespace vinci {

int cmd_cat(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("usage: replay cat RUN [options]");
  opts.add_options()("help,h", "show this help")("objects", "inline the objects records name")(
      "no-manifest", "leave out the manifest line");
  po::variables_map vm;
  if (auto stop = parse_options("replay cat", args, opts, {{"run", 1}}, &vm)) return *stop;
  if (!vm.count("run")) {
    std::cerr << "replay cat: expected a run folder\n" << opts;
    return 2;
  }
  auto reader = RunReader::open(vm["run"].as<std::string>());
  if (!reader.ok()) {
    std::cerr << "replay cat: " << reader.status().to_string() << "\n";
    return 2;
  }
  RunReader& r = **reader;
  if (!vm.count("no-manifest")) std::cout << manifest_to_json(r.manifest()) << "\n";
  const ObjectStore* store = vm.count("objects") ? &r.store() : nullptr;
  if (store) {
    struct stat sb;
    if (::stat(store->root().c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      std::cerr << "replay cat: --objects: expected the run's object store, a folder at " << store->root() << ", found "
                << (::stat(store->root().c_str(), &sb) != 0 ? "nothing" : "a file") << "\n";
      return 2;
    }
  }
  std::map<Digest, std::string> corrupt;
  std::set<Digest> missing;
  while (auto rec = r.next()) std::cout << record_to_json(*rec, store, &corrupt, &missing) << "\n";
  std::cout.flush();
  if (!r.status().ok()) {
    std::cerr << "replay cat: " << r.status().to_string() << "\n";
    return 2;
  }
  int rc = 0;
  for (const Digest& address : missing) {
    std::cerr << "replay cat: object " << address.hex() << " is missing from " << r.store().root() << "\n";
    rc = 1;
  }
  for (const auto& [address, why] : corrupt) {
    std::cerr << "replay cat: object " << address.hex() << " is corrupt: " << why << "\n";
    rc = 1;
  }
  if (r.damage()) {
    std::cerr << "replay cat: log damaged after record " << r.records_read() << ": " << r.damage()->to_string() << "\n";
    rc = 1;
  }
  return rc;
}

}  // namespace vinci
