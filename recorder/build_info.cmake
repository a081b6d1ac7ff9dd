# Writes build_info.h with vinci's git revision ("-dirty" when the work tree has changes).
# Runs at every build, so a run's manifest names the code that produced it; the header is
# rewritten only when the revision changes, so nothing recompiles otherwise.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT rev)
  set(rev unknown)
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    set(rev "${rev}-dirty")
  endif()
endif()
set(VINCI_GIT_REVISION ${rev})
configure_file(${IN} ${OUT} @ONLY)
