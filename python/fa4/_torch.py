"""placeholder"""
def register():
    pass
