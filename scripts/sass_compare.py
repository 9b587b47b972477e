#!/usr/bin/env python3
"""Compare the SASS of two builds' CUDA objects function by function.

Usage: scripts/sass_compare.py BASE_DIR NEW_DIR
  Each DIR holds `cuobjdump -sass OBJECT` dumps, one file per object, with the same file names
  (e.g. for f in build/CMakeFiles/fa4_objects.dir/src/cuda/**/*.cu.o; do cuobjdump -sass $f >
  DIR/$(basename $f).sass; done; cuobjdump ships in the CUDA toolkit and in the pip package
  nvidia-cuda-cuobjdump).

Why per function: a change that only adds kernels (or renames a template, e.g. a defaulted
template argument such as fwd_kernel<T, Inst> -> fwd_kernel<T, Inst, FwdArgs>) changes the dump
as a whole but not the code of the kernels that were there. Names are normalized for those two
cases (the sm80 kernel's Args argument, the anonymous-namespace hash of a file), whitespace is
collapsed (cuobjdump pads columns by the name's length) and the metadata between architectures
is dropped. Prints, per object, how many of the base's functions are identical, and every
function that differs, is missing, or is new. Exit status 1 if any base function differs or is
missing.
"""
import hashlib
import os
import re
import sys


def normalize(name):
    name = re.sub(r'InstE(\d)ENS0_7FwdArgsEEEvT1_', r'InstE\1EEEvNS0_7FwdArgsE', name)
    return re.sub(r'_GLOBAL__N__[0-9a-f]+_(\d+)_(\w+?)_cu_[0-9a-f]+', r'_GLOBAL__N__\2', name)


def functions(path):
    out, cur, arch, buf = {}, None, None, []

    def close():
        if cur is not None:
            out[cur] = hashlib.md5(''.join(buf).encode()).hexdigest()

    for line in open(path, errors='replace'):
        m = re.match(r'\s*code for (sm_\w+)', line)
        if m:
            arch = m.group(1)
        m = re.match(r'\s*Function : (\S+)', line)
        if m:
            close()
            cur, buf = (arch, normalize(m.group(1))), []
            continue
        if re.match(r'\s*={4}', line):
            close()
            cur, buf = None, []
            continue
        if re.match(r'\s*(Fatbin|code for|arch|\.)', line) or not line.strip():
            continue
        if cur is not None:
            buf.append(re.sub(r'\s+', ' ', line).strip() + '\n')
    close()
    return out


def main():
    base_dir, new_dir = sys.argv[1], sys.argv[2]
    bad = False
    for name in sorted(os.listdir(base_dir)):
        new_path = os.path.join(new_dir, name)
        if not os.path.exists(new_path):
            print(f'{name}: missing in {new_dir}')
            bad = True
            continue
        a, b = functions(os.path.join(base_dir, name)), functions(new_path)
        same = sum(1 for k in a if b.get(k) == a[k])
        print(f'{name}: {same} of {len(a)} functions identical ({len(b)} now)')
        for k in a:
            if k not in b or a[k] != b[k]:
                print(f'  {"DIFFERS" if k in b else "MISSING"} {k[0]} {k[1]}')
                bad = True
        for k in b:
            if k not in a:
                print(f'  new {k[0]} {k[1]}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
