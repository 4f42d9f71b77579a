"""`python -m dojo_ir.library`: rewrite the stored kernels from the generators."""

from . import KERNELS, path


def main() -> None:
    for name, kernel in KERNELS.items():
        path(name).write_text(kernel.text())
        print(path(name))


if __name__ == "__main__":
    main()
