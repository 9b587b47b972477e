# fa4_enable_cuda(): turns the CUDA language on when FA4_CUDA allows it and nvcc is found, and
# sets FA4_WITH_CUDA in the caller's scope. Used by the root project and by the Python
# extension's project (which links the CUDA objects and so needs the language enabled in its
# own directory too).
macro(fa4_enable_cuda)
  set(FA4_WITH_CUDA OFF)
  if(NOT FA4_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
      set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      enable_language(CUDA)
      set(FA4_WITH_CUDA ON)
      # CMake 3.25 does not know nvcc 13's C++20 flag; tell it, so targets that inherit C++20
      # can be generated (the flag itself is also passed explicitly on the CUDA sources).
      if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
        set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
        set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      endif()
    elseif(FA4_CUDA STREQUAL "ON")
      message(FATAL_ERROR "FA4_CUDA=ON but no CUDA compiler (nvcc) was found")
    endif()
  endif()
endmacro()
