# Writes OUT = a C++ line defining the source tree's git revision, "<sha>" or "<sha>-dirty" when tracked files
# differ from HEAD, "unknown" outside a git checkout. Run at every build (target roundoff_git_revision), so
# results name the code that actually produced them; OUT is rewritten only when the text changes, so an
# unchanged revision recompiles nothing.
execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT rev)
  set(rev "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    set(rev "${rev}-dirty")
  endif()
endif()
set(text "#define ROUNDOFF_GIT_REVISION \"${rev}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
