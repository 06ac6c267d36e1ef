"""The state codecs.

Type serializers, keyed-state headers, key-group blocks (decode and encode) and operator state.
"""
