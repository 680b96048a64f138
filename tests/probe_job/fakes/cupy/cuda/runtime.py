FREE = 1_000_000_000
TOTAL = 16_000_000_000


def getDevice():
    return 0


def memGetInfo():
    return FREE, TOTAL
