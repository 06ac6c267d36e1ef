"""A checkpoint's ``_metadata``.

The handles it records (``handles``), its reader with one serializer per version (``reader``), its
writer (``writer``), and where to find it (``locate``).
"""
