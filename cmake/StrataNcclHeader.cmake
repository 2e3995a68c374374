# Finds the newest nccl.h on the machine for the NCCL drop-in (src/nccl/): PyPI's nvidia-nccl package (the NCCL
# torch installs, with include/nccl.h), the CUDA toolkit's, and STRATA_NCCL_INCLUDE_DIR if given; the highest
# NCCL_VERSION_CODE wins. nccl.h includes cuda_runtime.h, so a CUDA include directory is needed too.
# Sets STRATA_NCCL_INCLUDE_DIR, STRATA_NCCL_VERSION (e.g. 2.30.7) and STRATA_NCCL_CUDA_INCLUDE_DIR, or leaves
# STRATA_NCCL_INCLUDE_DIR empty with the reason in STRATA_NCCL_MISSING.
set(_candidates "")
if(STRATA_NCCL_INCLUDE_DIR)
  list(APPEND _candidates "${STRATA_NCCL_INCLUDE_DIR}")
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
            "import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], 'include'))"
    OUTPUT_VARIABLE _pypi ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_pypi AND EXISTS "${_pypi}/nccl.h")
    list(APPEND _candidates "${_pypi}")
  endif()
endif()
foreach(_dir ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
  if(EXISTS "${_dir}/nccl.h")
    list(APPEND _candidates "${_dir}")
  endif()
endforeach()

set(STRATA_NCCL_INCLUDE_DIR "" CACHE PATH "Directory of the nccl.h the NCCL drop-in implements (empty: search)" FORCE)
set(STRATA_NCCL_VERSION "")
set(_best 0)
foreach(_dir ${_candidates})
  file(STRINGS "${_dir}/nccl.h" _code REGEX "^#define NCCL_VERSION_CODE [0-9]+")
  string(REGEX MATCH "[0-9]+$" _code "${_code}")
  if(_code AND _code GREATER _best)
    set(_best ${_code})
    set(STRATA_NCCL_INCLUDE_DIR "${_dir}" CACHE PATH "" FORCE)
    foreach(_part MAJOR MINOR PATCH)
      file(STRINGS "${_dir}/nccl.h" _v REGEX "^#define NCCL_${_part} [0-9]+")
      string(REGEX MATCH "[0-9]+$" _v_${_part} "${_v}")
    endforeach()
    set(STRATA_NCCL_VERSION "${_v_MAJOR}.${_v_MINOR}.${_v_PATCH}")
  endif()
endforeach()

find_path(STRATA_NCCL_CUDA_INCLUDE_DIR cuda_runtime.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
set(STRATA_NCCL_MISSING "")
if(NOT STRATA_NCCL_INCLUDE_DIR)
  set(STRATA_NCCL_MISSING "no nccl.h (pip install nvidia-nccl-cu13, or the CUDA toolkit's)")
elseif(NOT STRATA_NCCL_CUDA_INCLUDE_DIR)
  set(STRATA_NCCL_MISSING "no cuda_runtime.h, which nccl.h includes (the CUDA toolkit's headers)")
  set(STRATA_NCCL_INCLUDE_DIR "" CACHE PATH "" FORCE)
endif()
