// JSON renderings of records and manifests, for `replay cat` and for people.
//
// Field names are the schema's (camelCase); addresses print as 32 hex digits; 64-bit integers
// print as strings (JSON numbers lose precision past 2^53); unset union members are left out.
#ifndef VINCI_RECORDER_RECORD_JSON_H_
#define VINCI_RECORDER_RECORD_JSON_H_

#include <map>
#include <set>
#include <string>

#include "recorder/run.h"

namespace vinci {

// One line of JSON for a decoded record. With store, every object the record names by address
// is added under "objects": {"<hex>": {"kind": ..., "text": ...}} (bytes that are not UTF-8 text
// print as "hex"). Digests that are not objects (sample keys, parameter and run digests) are not
// looked up. An object missing from the store prints {"missing": true} and is added to *missing
// when given; one that is there but damaged (cut short, altered) prints {"corrupt": "why"} and is
// added to *corrupt when given.
std::string record_to_json(RecordView& record, const ObjectStore* store,
                           std::map<Digest, std::string>* corrupt = nullptr, std::set<Digest>* missing = nullptr);

// One line of JSON for a manifest, as {"manifest": {...}}.
std::string manifest_to_json(const ManifestInfo& manifest);

}  // namespace vinci

#endif  // VINCI_RECORDER_RECORD_JSON_H_
