"""The file suffixes fairvision reads as images (standard library only: imported where numpy must not be)."""

#: suffixes (lower case) of the image files taken from a folder
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
