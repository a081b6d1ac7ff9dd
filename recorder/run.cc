#include "recorder/run.h"

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <dirent.h>
#include <fcntl.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <optional>

#include "core/atomic_file.h"
#include "core/check.h"
#include "recorder/address.h"
#include "recorder/vinci.capnp.h"

namespace vinci {
namespace {

// Reads every struct and pointer reachable from a record, so that a message whose pointers are
// garbage (out of bounds, a text without its NUL, past the reader's traversal or nesting limit)
// throws here rather than in whichever reader of the record touches that field first: Cap'n Proto
// checks a pointer only when it is followed. Lists of scalars are checked when their pointer is
// read and are not walked. A record a writer made holds at least one word per struct and per list
// element it walks, so one that names more than its words (lists of empty structs, which cost no
// bytes) is refused before the walk can take long.
class Toucher {
 public:
  explicit Toucher(uint64_t words) : budget_(words) {}

  void touch_struct(capnp::DynamicStruct::Reader s) {
    spend();
    for (auto field : s.getSchema().getFields()) {
      if (s.has(field)) touch_value(s.get(field));  // has(): false for a union's other members
    }
  }

 private:
  void spend() {
    KJ_REQUIRE(budget_ > 0, "record names more structs and list elements than it has words");
    --budget_;
  }

  void touch_value(capnp::DynamicValue::Reader v) {
    switch (v.getType()) {
      case capnp::DynamicValue::STRUCT: touch_struct(v.as<capnp::DynamicStruct>()); break;
      case capnp::DynamicValue::LIST: {
        auto list = v.as<capnp::DynamicList>();
        switch (list.getSchema().whichElementType()) {
          case capnp::schema::Type::STRUCT:
          case capnp::schema::Type::LIST:
          case capnp::schema::Type::TEXT:
          case capnp::schema::Type::DATA:
          case capnp::schema::Type::ANY_POINTER:
            for (auto e : list) {
              spend();
              touch_value(e);
            }
            break;
          default:  // scalars: bounds-checked with the list pointer
            break;
        }
        break;
      }
      default:  // scalars, and texts and data, which get() has bounds-checked already
        break;
    }
  }

  uint64_t budget_;
};

std::string parent_folder(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto pos = p.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return p.substr(0, pos);
}

void fill_env(schema::Environment::Builder b, const Environment& e) {
  b.setCpu(e.cpu);
  b.setGpu(e.gpu);
  b.setDriver(e.driver);
  b.setCuda(e.cuda);
  b.setLibtorch(e.libtorch);
  b.setTorchThreads(e.torch_threads);
  b.setAtenCpuCapability(e.aten_cpu_capability);
  b.setOpenblasCoretype(e.openblas_coretype);
  b.setGitRevision(e.git_revision);
  b.setCompiler(e.compiler);
  b.setVinciVersion(e.vinci_version);
  auto kv = b.initNumeric(static_cast<unsigned>(e.numeric.size()));
  unsigned i = 0;
  for (const auto& [k, v] : e.numeric) {
    kv[i].setKey(k);
    kv[i].setValue(v);
    ++i;
  }
}

Environment read_env(schema::Environment::Reader r) {
  Environment e;
  e.cpu = r.getCpu();
  e.gpu = r.getGpu();
  e.driver = r.getDriver();
  e.cuda = r.getCuda();
  e.libtorch = r.getLibtorch();
  e.torch_threads = r.getTorchThreads();
  e.aten_cpu_capability = r.getAtenCpuCapability();
  e.openblas_coretype = r.getOpenblasCoretype();
  e.git_revision = r.getGitRevision();
  e.compiler = r.getCompiler();
  e.vinci_version = r.getVinciVersion();
  for (auto kv : r.getNumeric()) e.numeric[kv.getKey()] = kv.getValue();
  return e;
}

}  // namespace

RunLocation RunLocation::of(const std::string& run_dir) {
  RunLocation loc;
  loc.run_dir = run_dir;
  while (loc.run_dir.size() > 1 && loc.run_dir.back() == '/') loc.run_dir.pop_back();
  loc.log_dir = loc.run_dir + "/log";
  loc.manifest_path = loc.run_dir + "/manifest.bin";
  // A run keeps its objects in its own folder when it has an objects/ folder (a rescore, which is
  // written where --out says and nowhere else); else in the runs root's shared store.
  struct stat sb;
  std::string own = loc.run_dir + "/objects";
  loc.store_dir = ::stat(own.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode) ? own : parent_folder(loc.run_dir) + "/objects";
  return loc;
}

std::string encode_message(capnp::MessageBuilder& message) {
  kj::VectorOutputStream out;
  capnp::writePackedMessage(out, message);
  auto arr = out.getArray();
  return std::string(reinterpret_cast<const char*>(arr.begin()), arr.size());
}

const char* run_world_name(RunWorld world) {
  switch (world) {
    case RunWorld::kSim: return "sim";
    case RunWorld::kLive: return "live";
    case RunWorld::kRescore: return "rescore";
  }
  return "sim";
}

Result<RunWorld> parse_run_world(const std::string& name) {
  for (RunWorld w : {RunWorld::kSim, RunWorld::kLive, RunWorld::kRescore})
    if (name == run_world_name(w)) return w;
  return invalid_argument("world '" + name + "': expected sim, live or rescore");
}

std::string encode_manifest(const ManifestInfo& m) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::Manifest>();
  b.setFormatVersion(schema::FORMAT_VERSION);
  b.setName(m.name);
  b.setConfigPath(m.config_path);
  b.setConfigText(m.config_text);
  b.setSeed(m.seed);
  b.setWorld(run_world_name(m.world));
  fill_env(b.initEnvironment(), m.environment);
  b.setCompleted(m.completed);
  b.setRecordCount(m.record_count);
  if (m.completed) b.setRunDigest(AddressBytes(m.run_digest).data());
  b.setParentRun(m.parent_run);
  auto ann = b.initAnnotations(static_cast<unsigned>(m.annotations.size()));
  unsigned i = 0;
  for (const auto& [k, v] : m.annotations) {
    ann[i].setKey(k);
    ann[i].setValue(v);
    ++i;
  }
  return encode_message(msg);
}

Result<ManifestInfo> decode_manifest(std::string_view bytes, const std::string& path) {
  ManifestInfo m;
  std::string world;
  // Nothing returns from inside the reader's scope: its destructor may throw (a truncated stream
  // it skips to the end of), which would leak a return value already built.
  try {
    kj::ArrayInputStream in(
        kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
    capnp::PackedMessageReader reader(in);
    auto r = reader.getRoot<schema::Manifest>();
    m.format_version = r.getFormatVersion();
    if (m.format_version != 0 && m.format_version <= schema::FORMAT_VERSION) {
      m.name = r.getName();
      m.config_path = r.getConfigPath();
      m.config_text = r.getConfigText();
      m.seed = r.getSeed();
      world = r.getWorld();
      m.environment = read_env(r.getEnvironment());
      m.completed = r.getCompleted();
      m.record_count = r.getRecordCount();
      m.run_digest = address_of(r.getRunDigest());
      m.parent_run = r.getParentRun();
      for (auto kv : r.getAnnotations()) m.annotations[kv.getKey()] = kv.getValue();
    }
  } catch (const kj::Exception& e) {
    return corruption("manifest " + path + " does not parse: " + e.getDescription().cStr());
  }
  if (m.format_version == 0 || m.format_version > schema::FORMAT_VERSION) {
    return invalid_argument("manifest " + path + ": format version " + std::to_string(m.format_version) +
                            " is not one this vinci reads (1.." + std::to_string(schema::FORMAT_VERSION) + ")");
  }
  Result<RunWorld> w = parse_run_world(world);
  if (!w.ok()) return corruption("manifest " + path + ": " + w.status().message());
  m.world = *w;
  return m;
}

Result<ManifestInfo> read_manifest(const std::string& path) {
  auto bytes = read_file(path, kManifestFile);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) {
      return not_found("no run manifest at " + path + " (is this a run folder?)");
    }
    return bytes.status();
  }
  return decode_manifest(*bytes, path);
}

// ---------------------------------------------------------------------------------------------

struct RecordView::State {
  std::string payload;  // our copy: a multi-segment message is read lazily from it
  // Scratch space for the unpacked message; records larger than this allocate their own.
  kj::Array<capnp::word> scratch = kj::heapArray<capnp::word>(1024);
  std::optional<kj::ArrayInputStream> in;
  // Owned; destroyed before `in`, by drop_reader() only. A plain pointer, not an optional: the
  // reader's destructor reads the rest of a message its segment table promised and throws when the
  // payload is cut short, and a destructor called from a noexcept one would terminate the process.
  capnp::PackedMessageReader* reader = nullptr;

  void drop_reader() {
    capnp::PackedMessageReader* r = reader;
    reader = nullptr;
    try {
      delete r;  // the memory is freed even when the destructor throws
    } catch (const kj::Exception&) {
      // The payload was cut short; parse() has said so.
    }
  }
};

RecordView::RecordView() : state_(std::make_unique<State>()) {}
RecordView::~RecordView() {
  state_->drop_reader();
  state_->in.reset();
}

capnp::MessageReader& RecordView::message() {
  VINCI_REQUIRE(state_->reader != nullptr, "message() of a RecordView that holds no record");
  return *state_->reader;
}

Status RecordView::parse(std::string_view payload) {
  State& st = *state_;
  st.drop_reader();
  st.in.reset();
  st.payload.assign(payload);
  try {
    st.in.emplace(
        kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(st.payload.data()), st.payload.size()));
    st.reader = new capnp::PackedMessageReader(*st.in, capnp::ReaderOptions(), st.scratch.asPtr());
    // Read every segment the segment table names (segments after the first are read lazily; a
    // table names fewer than 512, or the reader refuses it), then touch every field, so a message
    // cut short or whose pointers are garbage fails here, not in a caller.
    uint64_t words = 0;
    for (unsigned id = 0; id < 512; ++id) words += st.reader->getSegment(id).size();
    Toucher(words).touch_struct(st.reader->getRoot<schema::Record>());
  } catch (const kj::Exception& e) {
    st.drop_reader();
    st.in.reset();
    return corruption(std::string("record does not parse: ") + e.getDescription().cStr());
  }
  return Status();
}

Result<std::unique_ptr<RecordView>> RecordView::decode(std::string_view payload) {
  auto v = std::make_unique<RecordView>();
  VINCI_RETURN_IF_ERROR(v->parse(payload));
  return v;
}

// ---------------------------------------------------------------------------------------------

RunWriter::~RunWriter() {
  // The log and store close first; the lock is released last.
  log_.reset();
  store_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

namespace {

// An exclusive lock on the run's folder, held as long as the returned descriptor is open: two
// processes writing one run (a run and its resume, or two resumes) would interleave records.
Result<int> lock_run_dir(const std::string& run_dir) {
  int fd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open run folder " + run_dir + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return failed_precondition("run folder " + run_dir + " is being written by another process; wait for it to end");
    }
    return io_error("cannot lock run folder " + run_dir + ": " + std::strerror(err));
  }
  return fd;
}

// Removes the temporary files of writes a killed writer of this run left unfinished
// (write_file_atomic's `NAME.tmp.PID.N`). Only the run's own folders: the object store is shared
// with other runs, and a temporary file there may belong to a live writer.
Status remove_stale_temps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status();  // a folder the killed writer had not made yet
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    if (std::strstr(e->d_name, ".tmp.") != nullptr) stale.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  for (const auto& path : stale) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return io_error("cannot remove the unfinished write " + path + ": " + std::strerror(errno));
    }
  }
  return Status();
}

// Why a new run cannot go where a run is: a complete run is kept as it is; a stopped one can be
// continued.
Status already_holds_a_run(const RunLocation& loc) {
  auto m = read_manifest(loc.manifest_path);
  if (m.ok() && m->completed) {
    return failed_precondition("run folder " + loc.run_dir +
                               " already holds a complete run; pick another name (a complete run is not resumed)");
  }
  return failed_precondition("run folder " + loc.run_dir +
                             " already holds a stopped run; pick another name, or continue it with `harness run "
                             "--resume " +
                             loc.run_dir + "`");
}

}  // namespace

Result<std::unique_ptr<RunWriter>> RunWriter::create(const std::string& run_dir, ManifestInfo info,
                                                     RunLogOptions options) {
  std::unique_ptr<RunWriter> w(new RunWriter());
  w->loc_ = RunLocation::of(run_dir);
  struct stat sb;
  if (::stat(w->loc_.manifest_path.c_str(), &sb) == 0) return already_holds_a_run(w->loc_);
  // A log without its manifest (deleted, or never written): writing a manifest beside it would
  // pair it with records of another run. Nothing is written.
  if (DIR* d = ::opendir(w->loc_.log_dir.c_str())) {
    bool empty = true;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
    }
    ::closedir(d);
    if (!empty) {
      return failed_precondition("run folder " + w->loc_.run_dir + " holds a log (" + w->loc_.log_dir +
                                 ") but no manifest: it is not a run this vinci can resume or "
                                 "extend; pick another name, or move the folder away");
    }
  }
  VINCI_RETURN_IF_ERROR(make_dirs(w->loc_.run_dir));
  VINCI_ASSIGN_OR_RETURN(w->lock_fd_, lock_run_dir(w->loc_.run_dir));
  if (::stat(w->loc_.manifest_path.c_str(), &sb) == 0) {  // made while this one waited for the lock
    return already_holds_a_run(w->loc_);
  }
  VINCI_RETURN_IF_ERROR(remove_stale_temps(w->loc_.run_dir));
  info.completed = false;
  info.record_count = 0;
  info.run_digest = Digest();
  info.format_version = schema::FORMAT_VERSION;
  w->manifest_ = std::move(info);
  VINCI_RETURN_IF_ERROR(write_file_atomic(w->loc_.manifest_path, encode_manifest(w->manifest_)));
  w->store_ = std::make_unique<ObjectStore>(w->loc_.store_dir);
  VINCI_ASSIGN_OR_RETURN(w->log_, RunLogWriter::create(w->loc_.log_dir, options));
  return w;
}

Result<std::unique_ptr<RunWriter>> RunWriter::resume(const std::string& run_dir, RunLogOptions options) {
  std::unique_ptr<RunWriter> w(new RunWriter());
  w->loc_ = RunLocation::of(run_dir);
  w->log_options_ = options;
  VINCI_ASSIGN_OR_RETURN(w->manifest_, read_manifest(w->loc_.manifest_path));
  VINCI_ASSIGN_OR_RETURN(w->lock_fd_, lock_run_dir(w->loc_.run_dir));
  // Read again under the lock: a writer that held it may have finished the run meanwhile.
  VINCI_ASSIGN_OR_RETURN(w->manifest_, read_manifest(w->loc_.manifest_path));
  if (w->manifest_.completed) {
    return failed_precondition("run " + w->loc_.run_dir + " is complete; nothing to resume");
  }
  // Nothing is written here: start_writing does it, once the caller knows the log is this run's.
  w->store_ = std::make_unique<ObjectStore>(w->loc_.store_dir);
  return w;
}

Status RunWriter::start_writing() {
  if (log_) return Status();
  VINCI_RETURN_IF_ERROR(remove_stale_temps(loc_.run_dir));
  VINCI_RETURN_IF_ERROR(remove_stale_temps(loc_.log_dir));
  VINCI_ASSIGN_OR_RETURN(log_, RunLogWriter::reopen(loc_.log_dir, log_options_, &recovery_));
  return Status();
}

uint64_t RunWriter::record_count() const {
  VINCI_REQUIRE(log_, "a resumed run's writer has not started writing");
  return log_->frame_count();
}

Digest RunWriter::digest() const {
  VINCI_REQUIRE(log_, "a resumed run's writer has not started writing");
  return log_->digest();
}

RunLogWriter& RunWriter::log() {
  VINCI_REQUIRE(log_, "a resumed run's writer has not started writing");
  return *log_;
}

Result<uint64_t> RunWriter::append(capnp::MessageBuilder& message) {
  VINCI_RETURN_IF_ERROR(start_writing());
  uint64_t seq = log_->frame_count();
  message.getRoot<schema::Record>().setSeq(seq);
  VINCI_RETURN_IF_ERROR(log_->append(encode_message(message)));
  return seq;
}

Status RunWriter::append_encoded(std::string_view payload) {
  VINCI_RETURN_IF_ERROR(start_writing());
  return log_->append(payload);
}

Status RunWriter::checkpoint() {
  VINCI_RETURN_IF_ERROR(start_writing());
  VINCI_RETURN_IF_ERROR(store_->sync());
  return log_->sync();
}

void init_run_end(capnp::MessageBuilder& message, uint64_t record_count, const Digest& digest) {
  auto end = message.initRoot<schema::Record>().initRunEnd();
  end.setRecordCount(record_count);
  end.setRunDigest(AddressBytes(digest).data());
}

Status RunWriter::finish() {
  VINCI_RETURN_IF_ERROR(start_writing());
  capnp::MallocMessageBuilder msg;
  init_run_end(msg, log_->frame_count(), log_->digest());
  VINCI_RETURN_IF_ERROR(append(msg).status());
  return mark_complete();
}

Status RunWriter::mark_complete() {
  VINCI_RETURN_IF_ERROR(checkpoint());
  manifest_.completed = true;
  manifest_.record_count = log_->frame_count();
  manifest_.run_digest = log_->digest();
  return write_file_atomic(loc_.manifest_path, encode_manifest(manifest_));
}

// ---------------------------------------------------------------------------------------------

Result<std::unique_ptr<RunReader>> RunReader::open(const std::string& run_dir) {
  std::unique_ptr<RunReader> r(new RunReader());
  r->loc_ = RunLocation::of(run_dir);
  VINCI_ASSIGN_OR_RETURN(r->manifest_, read_manifest(r->loc_.manifest_path));
  r->store_ = std::make_unique<ObjectStore>(r->loc_.store_dir);
  VINCI_ASSIGN_OR_RETURN(r->log_, RunLogReader::open(r->loc_.log_dir));
  return r;
}

std::string log_disagreement(const ManifestInfo& m, uint64_t records, const Digest& digest) {
  if (!m.completed) return "";
  if (records != m.record_count) {
    return "the log holds " + std::to_string(records) + " records, but the manifest records " +
           std::to_string(m.record_count) + " (a log cut short, extended, or another run's)";
  }
  if (digest != m.run_digest) {
    return "the log's digest is " + digest.hex() + ", but the manifest records " + m.run_digest.hex() +
           " (a log altered, or another run's)";
  }
  return "";
}

RecordView* RunReader::next() {
  if (!status_.ok() || damage_) return nullptr;
  LogFrame f;
  auto where_end = [&] {
    LogDamage d;
    const auto& files = log_->segment_files();
    d.file = files.empty() ? loc_.log_dir : files.back();
    struct stat sb;
    if (!files.empty() && ::stat(files.back().c_str(), &sb) == 0) d.offset = static_cast<uint64_t>(sb.st_size);
    return d;
  };
  if (!log_->next(&f)) {
    if (log_->damage()) {
      damage_ = log_->damage();
    } else if (log_->status().ok()) {
      std::string what = log_disagreement(manifest_, digest_.count(), digest_.value());
      if (!what.empty()) {
        damage_ = where_end();
        damage_->what = what;
      }
    }
    return nullptr;
  }
  if (manifest_.completed && digest_.count() >= manifest_.record_count) {
    damage_ = LogDamage{log_->segment_files()[f.segment], f.offset,
                        "the log holds more than the " + std::to_string(manifest_.record_count) +
                            " records its manifest records (a log extended, or another run's)"};
    return nullptr;
  }
  Status st = view_.parse(f.payload);
  if (!st.ok()) {
    status_ =
        corruption(log_->segment_files()[f.segment] + " at offset " + std::to_string(f.offset) + ": " + st.message());
    return nullptr;
  }
  digest_.add(f.payload);
  return &view_;
}

}  // namespace vinci
