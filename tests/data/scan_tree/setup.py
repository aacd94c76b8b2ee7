from setuptools import setup

REQUIRED = [
    "torch",
    "triton>=2.1",
]

setup(
    name="cuda-vlm",
    description="flash-attn powered (prose: not a finding)",
    install_requires=REQUIRED + ["flash_attn==2.5.8"],
    extras_require={"fast": ["xformers"]},
)
