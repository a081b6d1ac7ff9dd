#include "replay/run_data.h"

#include <capnp/message.h>

#include <nlohmann/json.hpp>

#include "harness/records.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

Result<RunData> read_run_data(const std::string& run_dir) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunReader::open(run_dir));
  RunData data;
  data.manifest = reader->manifest();
  Digest last_library;
  // (step, task) -> index in data.eval[step] (step kTtsStep: in data.tts)
  constexpr int32_t kTtsStep = -1000000;
  std::map<std::pair<int32_t, std::string>, size_t> where;
  while (RecordView* view = reader->next()) {
    auto r = view->message().getRoot<schema::Record>();
    bool tts = r.getPhase() == schema::Record::Phase::TTS;
    if (r.isMeasurement() && (r.getPhase() == schema::Record::Phase::EVAL || tts)) {
      int32_t step = tts ? kTtsStep : r.getStep();
      std::string task = r.getTask();
      auto key = std::make_pair(step, task);
      auto& list = tts ? data.tts : data.eval[step];
      auto it = where.find(key);
      if (it == where.end()) {
        it = where.emplace(key, list.size()).first;
        TaskTurns t;
        t.task = task;
        // Level from the task id ("L2_037"): the loop names tasks this way (data/tasks).
        t.level = task.size() > 1 && task[0] == 'L' ? task[1] - '0' : 0;
        list.push_back(t);
      }
      list[it->second].turns.push_back(read_turn_outcome(r.getMeasurement()));
    } else if (r.isLibrarySnapshot()) {
      last_library = read_library_snapshot(r.getLibrarySnapshot()).snapshot;
    }
  }
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage()) {
    return corruption("run " + run_dir + " is damaged after record " + std::to_string(reader->records_read()) + ": " +
                      reader->damage()->to_string());
  }
  data.records = reader->records_read();
  if (!last_library.is_zero()) {
    VINCI_ASSIGN_OR_RETURN(StoredObject lib, reader->store().get(last_library));
    // Canonical library bytes: a header line, then one JSON object per skill.
    size_t pos = lib.bytes.find('\n');
    while (pos != std::string::npos && pos + 1 < lib.bytes.size()) {
      size_t end = lib.bytes.find('\n', pos + 1);
      std::string line = lib.bytes.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
      if (!line.empty()) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("name") && j["name"].is_string()) {
          data.final_skills.push_back(j["name"].get<std::string>());
        }
      }
      pos = end;
    }
  }
  return data;
}

}  // namespace vinci
