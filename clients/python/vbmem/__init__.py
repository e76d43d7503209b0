"""vbmem: the Python client of vbmemd, the episodic-memory daemon (standard library only).

    import vbmem
    c = vbmem.Client()                      # $VBMEM_URL or http://127.0.0.1:8080, $VBMEM_API_KEY
    s = c.create_session()                  # the server's default model
    c.write(s, images=["a.png", "b.png"])   # PNG files, PNG bytes, NumPy arrays or PIL images
    print(c.sample(s, count=4).images.numpy().shape)

Every endpoint is one method of Client; errors are VbmemError (problem+json fields).
The command line is `vbmem` (or `python3 -m vbmem`).
"""
from .client import (DEFAULT_URL, Client, ConnectionFailed, DecodeResult, EncodeResult, FitResult,
                     ForgetResult, Forgotten, Images, Matrix, Model, ReadResult, ReadStep,
                     SampleResult, Session, SessionPage, VbmemError, encode_codes, encode_images,
                     encode_mask)
from .png import decode_png, encode_png

__version__ = "0.1.0"

__all__ = ["Client", "VbmemError", "ConnectionFailed", "Matrix", "Images", "Model", "Session",
           "SessionPage", "FitResult", "ForgetResult", "Forgotten", "SampleResult", "ReadStep", "ReadResult", "EncodeResult",
           "DecodeResult", "DEFAULT_URL", "encode_codes", "encode_images", "encode_mask",
           "encode_png", "decode_png", "__version__"]
