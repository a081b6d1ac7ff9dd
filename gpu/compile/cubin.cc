#include "gpu/compile/cubin.h"

#include <elf.h>

#include <cstring>

namespace vinci {

namespace {

// A struct of type T at offset `at`, if the image holds all of it.
template <typename T>
bool read_at(std::string_view image, uint64_t at, T* out) {
  if (at > image.size() || image.size() - at < sizeof(T)) return false;
  std::memcpy(out, image.data() + at, sizeof(T));
  return true;
}

// A NUL-terminated name at `at` inside the string table [table, table + size).
std::string name_at(std::string_view image, uint64_t table, uint64_t size, uint64_t at) {
  if (table > image.size() || size > image.size() - table || at >= size) return "";
  std::string_view strings = image.substr(table, size);
  size_t end = strings.find('\0', at);
  if (end == std::string_view::npos) return "";
  return std::string(strings.substr(at, end - at));
}

bool is_global_section(const std::string& name) { return name == ".nv.global" || name == ".nv.global.init"; }

}  // namespace

Result<std::vector<CubinGlobalSection>> cubin_global_sections(std::string_view image) {
  Elf64_Ehdr eh;
  if (!read_at(image, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return invalid_argument("cubin: not a 64-bit little-endian ELF image (" + std::to_string(image.size()) + " bytes)");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum)
    return invalid_argument("cubin: section table of " + std::to_string(eh.e_shnum) + " entries of " +
                            std::to_string(eh.e_shentsize) + " bytes, names in section " +
                            std::to_string(eh.e_shstrndx));
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i)
    if (!read_at(image, eh.e_shoff + i * sizeof(Elf64_Shdr), &sections[i]))
      return invalid_argument("cubin: section header " + std::to_string(i) + " lies past the image's end");
  const Elf64_Shdr& names = sections[eh.e_shstrndx];
  std::vector<CubinGlobalSection> out;
  std::vector<int> slot(sections.size(), -1);  // section index -> index in out
  for (size_t i = 0; i < sections.size(); ++i) {
    std::string name = name_at(image, names.sh_offset, names.sh_size, sections[i].sh_name);
    if (!is_global_section(name) || sections[i].sh_size == 0) continue;
    slot[i] = static_cast<int>(out.size());
    out.push_back({name, sections[i].sh_size, {}});
  }
  if (out.empty()) return out;
  for (const Elf64_Shdr& symtab : sections) {
    if (symtab.sh_type != SHT_SYMTAB) continue;
    if (symtab.sh_link >= sections.size())
      return invalid_argument("cubin: symbol table names section " + std::to_string(symtab.sh_link));
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      if (!read_at(image, symtab.sh_offset + at, &sym))
        return invalid_argument("cubin: the symbol table lies past the image's end");
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx >= sections.size() || slot[sym.st_shndx] < 0)
        continue;
      std::string name = name_at(image, strtab.sh_offset, strtab.sh_size, sym.st_name);
      if (name.empty()) continue;
      out[static_cast<size_t>(slot[sym.st_shndx])].symbols.emplace_back(name, sym.st_value);
    }
  }
  return out;
}

}  // namespace vinci
