#include "harness/record_sink.h"

#include <capnp/any.h>
#include <capnp/schema.h>

#include "recorder/record_json.h"
#include "recorder/vinci.capnp.h"

namespace vinci {

Status WriteSink::put(capnp::MessageBuilder& record) { return writer_->append(record).status(); }

CheckSink::CheckSink(std::vector<std::string> expected, ObjectStore* store, RunWriter* writer,
                     std::function<Status()> start_writing)
    : expected_(std::move(expected)), store_(store), writer_(writer), start_writing_(std::move(start_writing)) {}

std::string describe_record(schema::Record::Reader r) {
  std::string out;
  if (r.getStep() >= 0) out += "step " + std::to_string(r.getStep()) + " ";
  if (r.hasTask() && r.getTask().size()) out += "task " + std::string(r.getTask().cStr()) + " ";
  if (r.getScheme() >= 0) out += "scheme " + std::to_string(r.getScheme()) + " ";
  if (r.getRollout() >= 0) out += "rollout " + std::to_string(r.getRollout()) + " ";
  if (r.getTurn() >= 0) out += "turn " + std::to_string(r.getTurn()) + " ";
  auto record_schema = capnp::Schema::from<schema::Record>();
  auto which = static_cast<uint16_t>(r.which());
  for (auto f : record_schema.getUnionFields()) {
    if (f.getProto().getDiscriminantValue() == which) out += f.getProto().getName().cStr();
  }
  return out;
}

namespace {

// Whether two encoded records say the same thing: equal bytes, or equal canonical forms. A field
// added to the schema (docs/log_format.md, "Schema evolution") makes a recorder lay a struct out
// with one more slot, unset; the canonical form drops trailing unset slots, so a record an older
// recorder wrote still matches the one this recorder derives.
bool same_record(const std::string& a, const std::string& b) {
  if (a == b) return true;
  RecordView va, vb;
  if (!va.parse(a).ok() || !vb.parse(b).ok()) return false;
  kj::Array<capnp::word> ca = capnp::canonicalize(va.message().getRoot<schema::Record>());
  kj::Array<capnp::word> cb = capnp::canonicalize(vb.message().getRoot<schema::Record>());
  return ca.asBytes() == cb.asBytes();
}

}  // namespace

Status CheckSink::put(capnp::MessageBuilder& record) {
  record.getRoot<schema::Record>().setSeq(position_);
  if (position_ < expected_.size()) {
    std::string payload = encode_message(record);
    if (!same_record(payload, expected_[position_])) {
      RecordView got;
      RecordView want;
      std::string got_json = got.parse(payload).ok() ? record_to_json(got, nullptr) : "?";
      std::string want_json = want.parse(expected_[position_]).ok() ? record_to_json(want, nullptr) : "(unreadable)";
      std::string where = want.parse(expected_[position_]).ok()
                              ? describe_record(want.message().getRoot<schema::Record>())
                              : std::string("?");
      diverged_ = true;
      return mismatch("record " + std::to_string(position_) + " (" + where + ") differs\n  recorded: " + want_json +
                      "\n  derived:  " + got_json);
    }
    digest_.add(expected_[position_]);  // the recorded bytes: the run digest is over what the log holds
    ++position_;
    ++checked_;
    return Status();
  }
  if (!writer_) {
    ran_past_log_ = true;
    return mismatch("the run's log ends after " + std::to_string(expected_.size()) +
                    " records, but re-driving it produces more (next: " +
                    describe_record(record.getRoot<schema::Record>().asReader()) + ")");
  }
  if (!writer_->writing()) VINCI_RETURN_IF_ERROR(start_writing_ ? start_writing_() : writer_->start_writing());
  VINCI_RETURN_IF_ERROR(writer_->append(record).status());
  digest_.add(encode_message(record));
  ++position_;
  return Status();
}

Result<std::vector<std::string>> read_payloads(const std::string& run_dir, bool allow_damage,
                                               std::optional<LogDamage>* damage) {
  VINCI_ASSIGN_OR_RETURN(auto reader, RunLogReader::open(RunLocation::of(run_dir).log_dir));
  std::vector<std::string> out;
  LogFrame f;
  while (reader->next(&f)) out.emplace_back(f.payload);
  VINCI_RETURN_IF_ERROR(reader->status());
  if (reader->damage() && !allow_damage) {
    return corruption("run log of " + run_dir + " is damaged after record " + std::to_string(out.size()) + ": " +
                      reader->damage()->to_string());
  }
  if (damage) *damage = reader->damage();
  return out;
}

}  // namespace vinci
